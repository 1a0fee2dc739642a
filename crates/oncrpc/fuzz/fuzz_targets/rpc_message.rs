//! RPC message decoder: arbitrary bytes as a call (through the whole dispatcher,
//! auth included) and as a reply. No panic; a decoded header re-encodes to the same
//! bytes.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use oncrpc::{CallHeader, Dispatcher, ReplyHeader, Request, Service, ServiceResult};
use xdr::{Decoder, Encode, Encoder};

struct Echo;

impl Service for Echo {
    async fn call(&self, mut req: Request) -> ServiceResult {
        let data = req.args.opaque(1 << 20)?;
        req.args.finish()?;
        let mut enc = Encoder::new();
        enc.ddp_opaque(data);
        Ok(enc.finish())
    }
}

fn dispatcher() -> &'static Dispatcher {
    static D: OnceLock<Dispatcher> = OnceLock::new();
    D.get_or_init(|| {
        let mut d = Dispatcher::new();
        let _ = d.register(100, [1, 2], Arc::new(Echo));
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);

    let mut dec = Decoder::new(bytes.clone());
    if let Ok(h) = CallHeader::decode(&mut dec) {
        let used = dec.position();
        assert_eq!(&h.to_xdr().to_bytes()[..], &data[..used]);
    }
    let mut dec = Decoder::new(bytes.clone());
    if let Ok(h) = ReplyHeader::decode(&mut dec) {
        let used = dec.position();
        let again = ReplyHeader::decode(&mut Decoder::new(h.to_xdr().to_bytes())).unwrap();
        assert_eq!(again, h);
        assert!(used >= 12);
    }

    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    if let Some(reply) = rt.block_on(dispatcher().dispatch(bytes)) {
        let mut dec = Decoder::new(reply.to_bytes());
        ReplyHeader::decode(&mut dec).unwrap();
    }
});

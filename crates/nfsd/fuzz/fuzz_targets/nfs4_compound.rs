//! NFSv4.1 COMPOUNDs from arbitrary bytes against the real server (`Nfs4Server`, the
//! code `nfsd` runs for NFSv4.1) on a scratch export, inside a session.
//!
//! The first byte picks the mode: even, the rest is a whole `COMPOUND4args` (the
//! session operations, the first-operation rules, anything); odd, a valid SEQUENCE
//! on the fixture's session comes first and the rest are the other operations'
//! bytes (bits 1-4 of the first byte: how many), so that the operations past
//! SEQUENCE (OPEN, READ, WRITE, LOCK, RENAME, ...) are reached with a session. Every
//! reply must decode as `COMPOUND4res`, and the export must still be there. Even mode
//! also asks where the first WRITE's data lies (`nfs4::ulb::call_data_item`). When the
//! bytes destroyed the session (or its client), the next input makes a new one.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use nfs4::compound::{Compound4Args, Compound4Res, NfsArgop4, NfsResop4};
use nfs4::session::*;
use nfs4::{ClientOwner4, NfsStat4, Res4, SessionId4};
use nfsd::v4::state::Principal;
use nfsd::v4::Nfs4Server;
use nfsd::{Caller, ExportLine, ExportOptions, HandleConfig, NfsServer, Table};
use xdr::{Bytes, Decode, Decoder, Encode, Encoder};

struct Fixture {
    v4: Nfs4Server,
    dir: std::path::PathBuf,
    /// The session and slot 0's next sequence id.
    session: Mutex<(SessionId4, u32)>,
}

fn run(v4: &Nfs4Server, args: Bytes) -> Compound4Res {
    let reply = v4.compound(
        &Caller::default(),
        Principal::default(),
        Decoder::new(args),
        Instant::now(),
    );
    let mut d = Decoder::new(reply.to_bytes());
    let res = Compound4Res::decode(&mut d).expect("every reply decodes as COMPOUND4res");
    d.finish().expect("and nothing follows it");
    res
}

fn session(v4: &Nfs4Server) -> SessionId4 {
    let one = |op| {
        Compound4Args {
            tag: "fuzz".into(),
            minorversion: 1,
            argarray: vec![op],
        }
        .to_xdr()
        .to_bytes()
    };
    let res = run(
        v4,
        one(NfsArgop4::ExchangeId(ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: [1; 8],
                co_ownerid: "fuzz".into(),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: None,
        })),
    );
    let Some(NfsResop4::ExchangeId(Res4::Ok(ex))) = res.resarray.first() else {
        panic!("EXCHANGE_ID: {res:?}")
    };
    let attrs = ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 8192,
        ca_maxoperations: 32,
        ca_maxrequests: 1,
        ca_rdma_ird: None,
    };
    let res = run(
        v4,
        one(NfsArgop4::CreateSession(CreateSession4Args {
            csa_clientid: ex.eir_clientid,
            csa_sequence: ex.eir_sequenceid,
            csa_flags: 0,
            csa_fore_chan_attrs: attrs.clone(),
            csa_back_chan_attrs: attrs,
            csa_cb_program: 1,
            csa_sec_parms: vec![CallbackSecParms4::AuthNone],
        })),
    );
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.resarray.first() else {
        panic!("CREATE_SESSION: {res:?}")
    };
    cs.csr_sessionid
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nfsd-fuzz-nfs4-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("f"), b"fuzzed file").unwrap();
        let _ = std::os::unix::fs::symlink("f", dir.join("l"));
        let options = ExportOptions {
            read_only: false,
            secure: false,
            ..ExportOptions::default()
        };
        let table = Table::open(
            &[ExportLine::everyone(&dir, options)],
            &HandleConfig::ephemeral().unwrap(),
            None,
        )
        .unwrap();
        let v4 = Nfs4Server::new(Arc::new(NfsServer::new(table)), None);
        let sid = session(&v4);
        Fixture {
            v4,
            dir,
            session: Mutex::new((sid, 1)),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let f = fixture();
    if mode & 1 == 0 {
        // What a TCP reader asks of the same bytes (`nfs4::ulb::call_data_item`):
        // never a panic, and the item it names begins right after its length word.
        if let Some(item) = nfs4::ulb::call_data_item(rest) {
            assert!((4..=rest.len()).contains(&item.offset));
            let word = &rest[item.offset - 4..item.offset];
            assert_eq!(word, (item.len as u32).to_be_bytes());
        }
        run(&f.v4, Bytes::copy_from_slice(rest));
    } else {
        let mut s = f.session.lock().unwrap();
        let mut e = Encoder::new();
        e.string(b"").u32(1).u32(1 + u32::from(mode >> 1) % 16);
        NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: s.0,
            sa_sequenceid: s.1,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: mode & 0x20 != 0,
        })
        .encode(&mut e);
        let mut args = e.finish().to_bytes().to_vec();
        args.extend_from_slice(rest);
        let res = run(&f.v4, Bytes::from(args));
        match res.resarray.first().map(NfsResop4::status) {
            Some(NfsStat4::NFS4_OK) => s.1 = s.1.wrapping_add(1),
            Some(NfsStat4::NFS4ERR_BADSESSION) => *s = (session(&f.v4), 1),
            _ => {}
        }
    }
    // Confinement: no name the bytes can reach removes or renames the export root.
    assert!(f.dir.exists(), "the export is still there");
});

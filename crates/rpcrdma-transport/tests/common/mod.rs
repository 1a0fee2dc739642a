//! The test RPC program, its Upper Layer Binding, and server/client set-up over the
//! iWARP provider on loopback.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use iwarp::{IwarpConfig, IwarpProvider};
use oncrpc::{Client, ClientConfig, Dispatcher, Request, Service, ServiceError};
use rpcrdma::rpc::{results_offset, ProcId};
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use rpcrdma_transport::{RdmaConfig, RdmaServer, RdmaTransport, StatsRegistry};
use xdr::{padded_len, Decoder, Encoder, XdrStream};

pub const PROG: u32 = 0x2000_5151;
pub const VERS: u32 = 1;
pub const NULL: u32 = 0;
/// ECHO(opaque data<>) -> opaque data<>, both DDP-eligible.
pub const ECHO: u32 = 1;
/// GEN(unsigned n) -> opaque data<n>, DDP-eligible (like NFS READ).
pub const GEN: u32 = 2;
/// SINK(opaque data<>) -> (unsigned len, unsigned sum): DDP-eligible argument (WRITE).
pub const SINK: u32 = 3;
/// BIG(unsigned n, opaque pad<>) -> opaque data<n>, nothing DDP-eligible.
pub const BIG: u32 = 4;
/// SLOW(opaque data<>) -> opaque data<>, after 400 ms (keeps a credit in service).
pub const SLOW: u32 = 5;
/// GATED(unsigned n, opaque pad<>) -> opaque data<n>, nothing DDP-eligible, answered
/// only once the test opens [`GATE`] (one permit per call).
pub const GATED: u32 = 6;
/// Not bound to RDMA: a program the binding does not cover.
pub const UNBOUND_PROG: u32 = 0x2000_5152;

pub mod mem_provider;

/// RPC reply header with an AUTH_NONE verifier: xid, REPLY, ACCEPTED, flavor, len, stat.
const REPLY_HDR: u32 = 24;

pub fn pattern(n: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
            .collect::<Vec<u8>>(),
    )
}

pub fn checksum(b: &[u8]) -> u32 {
    b.iter()
        .fold(0u32, |a, &x| a.wrapping_mul(16_777_619) ^ u32::from(x))
}

pub struct TestProgram;

/// Holds GATED calls until the test adds permits.
pub static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

impl Service for TestProgram {
    async fn call(&self, mut req: Request) -> Result<XdrStream, ServiceError> {
        let mut enc = Encoder::new();
        match req.proc_ {
            NULL => {}
            ECHO => {
                let data = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                enc.ddp_opaque(data);
            }
            GEN => {
                let n = req.args.u32()?;
                req.args.finish()?;
                enc.ddp_opaque(pattern(n as usize, 7));
            }
            SINK => {
                let data = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                enc.u32(data.len() as u32).u32(checksum(&data));
            }
            GATED => {
                let n = req.args.u32()?;
                let _pad = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                if let Ok(p) = GATE.acquire().await {
                    p.forget();
                }
                enc.opaque(&pattern(n as usize, 9));
            }
            BIG => {
                let n = req.args.u32()?;
                let _pad = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                enc.opaque(&pattern(n as usize, 9));
            }
            SLOW => {
                let data = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                tokio::time::sleep(std::time::Duration::from_millis(400)).await;
                enc.ddp_opaque(data);
            }
            _ => return Err(ServiceError::ProcUnavail),
        }
        Ok(enc.finish())
    }
}

/// The test program's Upper Layer Binding.
pub struct TestBinding;

fn first_arg_u32(call: &XdrStream) -> u32 {
    let mut dec = Decoder::new(call.inline.clone());
    // xid, CALL, rpcvers, prog, vers, proc, cred, verf
    for _ in 0..6 {
        if dec.u32().is_err() {
            return 0;
        }
    }
    for _ in 0..2 {
        if dec.u32().is_err() || dec.opaque(400).is_err() {
            return 0;
        }
    }
    dec.u32().unwrap_or(0)
}

impl UpperLayerBinding for TestBinding {
    fn binds(&self, prog: u32, vers: u32) -> bool {
        prog == PROG && vers == VERS
    }

    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing {
        let ddp = |n: u32| ReplySizing {
            max_reply: REPLY_HDR + 4 + padded_len(n as usize) as u32,
            ddp_results: vec![n],
        };
        match proc_id.proc_num {
            ECHO | SLOW => ddp(call.ddp.first().map_or(0, |d| d.data.len() as u32)),
            GEN => ddp(first_arg_u32(call)),
            SINK => ReplySizing {
                max_reply: REPLY_HDR + 8,
                ddp_results: vec![],
            },
            BIG | GATED => ReplySizing {
                max_reply: REPLY_HDR + 4 + padded_len(first_arg_u32(call) as usize) as u32,
                ddp_results: vec![],
            },
            _ => ReplySizing {
                max_reply: REPLY_HDR,
                ddp_results: vec![],
            },
        }
    }

    /// ECHO, SINK and SLOW take one `opaque data<>`, DDP-eligible.
    fn call_ddp_positions(&self, proc_id: ProcId, call: &Bytes) -> Option<Vec<u32>> {
        match proc_id.proc_num {
            ECHO | SINK | SLOW => rpcrdma::ulb::first_argument_position(call),
            _ => Some(Vec::new()),
        }
    }

    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        let Some(at) = results_offset(reply) else {
            return Some(Vec::new());
        };
        match proc_id.proc_num {
            ECHO | GEN | SLOW => Some(vec![at + 4]),
            _ => Some(Vec::new()),
        }
    }
}

pub fn iwarp() -> IwarpProvider {
    IwarpProvider::new(IwarpConfig {
        first_send_delay: Duration::ZERO,
        ..IwarpConfig::default()
    })
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub stats: StatsRegistry,
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn dispatcher() -> Arc<Dispatcher> {
    let mut d = Dispatcher::new();
    d.register(PROG, [VERS], Arc::new(TestProgram)).unwrap();
    d.register(UNBOUND_PROG, [VERS], Arc::new(TestProgram))
        .unwrap();
    Arc::new(d)
}

/// Starts a server on `addr` (port 0 for any).
pub async fn start_server_at(config: RdmaConfig, addr: SocketAddr) -> TestServer {
    let server = RdmaServer::new(iwarp(), dispatcher(), Arc::new(TestBinding), config);
    let listener = server.bind(addr).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let stats = server.stats();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    TestServer { addr, stats, task }
}

pub async fn start_server(config: RdmaConfig) -> TestServer {
    start_server_at(config, "127.0.0.1:0".parse().unwrap()).await
}

pub fn client(addr: SocketAddr, config: RdmaConfig) -> (Client, StatsRegistry) {
    let t = RdmaTransport::new(iwarp(), addr, config, Arc::new(TestBinding));
    let stats = t.stats();
    let c = Client::new(
        t,
        ClientConfig {
            timeout: Duration::from_secs(60),
            ..ClientConfig::default()
        },
    );
    (c, stats)
}

pub fn ddp_arg(data: Bytes) -> XdrStream {
    let mut e = Encoder::new();
    e.ddp_opaque(data);
    e.finish()
}

pub fn u32_arg(n: u32) -> XdrStream {
    let mut e = Encoder::new();
    e.u32(n);
    e.finish()
}

pub fn big_arg(n: u32, pad: &[u8]) -> XdrStream {
    let mut e = Encoder::new();
    e.u32(n).opaque(pad);
    e.finish()
}

pub async fn echo(c: &Client, data: Bytes) -> Bytes {
    let mut r = c.call(PROG, VERS, ECHO, ddp_arg(data)).await.unwrap();
    let out = r.results.opaque(u32::MAX).unwrap();
    r.results.finish().unwrap();
    out
}

/// A whole RPC Call message (AUTH_NONE) for `prog`/`vers`/`proc_` with arguments
/// encoded by `args`, for tests that drive `RdmaSender` directly with their own XIDs.
pub fn call_msg(xid: u32, prog: u32, proc_: u32, args: impl FnOnce(&mut Encoder)) -> XdrStream {
    use xdr::Encode;
    let mut enc = Encoder::new();
    oncrpc::message::CallHeader::new(
        oncrpc::message::Xid(xid),
        prog,
        VERS,
        proc_,
        oncrpc::OpaqueAuth::none(),
    )
    .encode(&mut enc);
    args(&mut enc);
    enc.finish()
}

/// The next whole reply on a connection driven directly (not a call failure).
pub async fn next_reply(rx: &mut rpcrdma_transport::RdmaReceiver) -> Bytes {
    use oncrpc::RecordReceiver;
    rx.recv()
        .await
        .expect("receive")
        .expect("connection open")
        .into_message()
        .expect("a reply, not a call failure")
}

/// The XID of an RPC Reply and its first result, an `opaque<>`.
pub fn reply_opaque(reply: Bytes) -> (u32, Bytes) {
    let mut dec = Decoder::new(reply);
    let h = oncrpc::message::ReplyHeader::decode(&mut dec).expect("reply header");
    assert!(
        matches!(
            h.body,
            oncrpc::message::ReplyBody::Accepted {
                status: oncrpc::message::AcceptedStatus::Success,
                ..
            }
        ),
        "reply not SUCCESS: {:?}",
        h.body
    );
    (h.xid.0, dec.opaque(u32::MAX).expect("opaque result"))
}

/// Waits until `cond` holds: tests wait for events, not for a time. The 60 s bound
/// only turns a hang (an event that never comes) into a failure.
pub async fn until(mut cond: impl FnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the awaited condition never held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

//! verbs-rpc-echo: ONC RPC through the RPC-over-RDMA transport (`RdmaServer`,
//! `RdmaTransport`) over the verbs provider (`verbs::VerbsCm`), for the lab.
//!
//! ```text
//! verbs-rpc-echo server ADDR:PORT
//! verbs-rpc-echo client ADDR:PORT
//! ```
//!
//! The program has NULL and ECHO(opaque<>) -> opaque<>, nothing DDP-eligible, and
//! the client's messages fit the inline threshold: Sends and Receives only. Chunks
//! (RDMA Read/Write of the peer's regions) need the `rdma` API to tell the
//! transport a verbs region's tagged base (docs/verbs-provider.md).
//!
//! The client prints `ok null`, `ok echo n=<len> calls=10` per size and
//! `ok client PASS`; the server serves until killed.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::{Client, ClientConfig, Dispatcher, Request, Service, ServiceError};
use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use rpcrdma_transport::{RdmaConfig, RdmaServer, RdmaTransport};
use xdr::{padded_len, Encoder, XdrStream};

const PROG: u32 = 0x2000_5153;
const VERS: u32 = 1;
const NULL: u32 = 0;
const ECHO: u32 = 1;
/// Reply header with an AUTH_NONE verifier.
const REPLY_HDR: u32 = 24;
/// Largest echo: fits the default 4 KiB inline threshold with the headers.
const MAX_ECHO: u32 = 3000;

static CALLS: AtomicU32 = AtomicU32::new(0);

struct Echo;

impl Service for Echo {
    async fn call(&self, mut req: Request) -> Result<XdrStream, ServiceError> {
        let mut enc = Encoder::new();
        match req.proc_ {
            NULL => {}
            ECHO => {
                let data = req.args.opaque(MAX_ECHO)?;
                req.args.finish()?;
                enc.opaque(&data);
            }
            _ => return Err(ServiceError::ProcUnavail),
        }
        CALLS.fetch_add(1, Ordering::Relaxed);
        Ok(enc.finish())
    }
}

struct Binding;

impl UpperLayerBinding for Binding {
    fn binds(&self, prog: u32, vers: u32) -> bool {
        prog == PROG && vers == VERS
    }

    fn reply_sizing(&self, _proc_id: ProcId, _call: &XdrStream) -> ReplySizing {
        ReplySizing {
            max_reply: REPLY_HDR + 4 + padded_len(MAX_ECHO as usize) as u32,
            ddp_results: vec![],
        }
    }

    fn call_ddp_arguments(&self, _proc_id: ProcId) -> usize {
        0
    }
}

fn pattern(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>())
}

async fn server(addr: SocketAddr) -> Result<(), String> {
    let mut d = Dispatcher::new();
    d.register(PROG, [VERS], Arc::new(Echo))
        .map_err(|e| format!("register: {e:?}"))?;
    let server = RdmaServer::new(
        verbs::VerbsCm::new(),
        Arc::new(d),
        Arc::new(Binding),
        RdmaConfig::default(),
    );
    let listener = server
        .bind(addr)
        .await
        .map_err(|e| format!("bind {addr}: {e}"))?;
    println!("ok listen {addr}");
    server
        .serve(listener)
        .await
        .map_err(|e| format!("serve: {e}"))
}

async fn client(addr: SocketAddr) -> Result<(), String> {
    let t = RdmaTransport::new(
        verbs::VerbsCm::new(),
        addr,
        RdmaConfig::default(),
        Arc::new(Binding),
    );
    let c = Client::new(
        t,
        ClientConfig {
            timeout: Duration::from_secs(20),
            ..ClientConfig::default()
        },
    );
    c.call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .map_err(|e| format!("NULL: {e}"))?;
    println!("ok null");
    for n in [0usize, 1, 100, 1000, MAX_ECHO as usize] {
        for _ in 0..10 {
            let data = pattern(n);
            let mut e = Encoder::new();
            e.opaque(&data);
            let mut r = c
                .call(PROG, VERS, ECHO, e.finish())
                .await
                .map_err(|e| format!("ECHO {n}: {e}"))?;
            let out = r
                .results
                .opaque(MAX_ECHO)
                .map_err(|e| format!("ECHO {n} results: {e}"))?;
            if out != data {
                return Err(format!("ECHO {n}: other bytes came back"));
            }
        }
        println!("ok echo n={n} calls=10");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(addr)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: verbs-rpc-echo server|client ADDR:PORT");
        return ExitCode::from(2);
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{addr}: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match mode.as_str() {
        "server" => server(addr).await,
        "client" => client(addr).await,
        _ => Err(format!("unknown mode {mode}")),
    };
    match r {
        Ok(()) => {
            println!("ok {mode} PASS calls={}", CALLS.load(Ordering::Relaxed));
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL {mode}: {e}");
            ExitCode::FAILURE
        }
    }
}

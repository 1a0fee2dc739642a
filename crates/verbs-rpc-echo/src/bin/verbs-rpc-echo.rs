//! verbs-rpc-echo: ONC RPC through the RPC-over-RDMA transport (`RdmaServer`,
//! `RdmaTransport`) over the verbs provider (`verbs::VerbsCm`), for the lab.
//!
//! ```text
//! verbs-rpc-echo server ADDR:PORT
//! verbs-rpc-echo client ADDR:PORT
//! ```
//!
//! The program has NULL and ECHO(opaque<>) -> opaque<>, whose argument and result are
//! DDP-eligible (as NFS WRITE's and READ's data): small echoes go inline (Sends and
//! Receives), larger ones through a Read chunk (the server RDMA-Reads the client's
//! registered data) and a Write chunk (the server RDMA-Writes the result into the
//! client's registered region), addressed as the verbs device registered them
//! (`rdma::MemoryRegion::remote_offset`) and fenced by deregistration (a verbs device
//! cannot invalidate plain registrations: `DeviceAttributes::invalidate`).
//!
//! The client prints `ok null`, `ok echo n=<len> calls=<k>` per size and
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
use rpcrdma_transport::{Counter, RdmaConfig, RdmaServer, RdmaTransport};
use xdr::{padded_len, Encoder, XdrStream};

const PROG: u32 = 0x2000_5153;
const VERS: u32 = 1;
const NULL: u32 = 0;
const ECHO: u32 = 1;
/// Reply header with an AUTH_NONE verifier.
const REPLY_HDR: u32 = 24;
/// Largest echo: 1 MiB, an NFS READ's or WRITE's usual size.
const MAX_ECHO: u32 = 1 << 20;

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
                enc.ddp_opaque(data);
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

    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing {
        match proc_id.proc_num {
            ECHO => {
                let n = call.ddp.first().map_or(0, |d| d.data.len() as u32);
                ReplySizing {
                    max_reply: REPLY_HDR + 4 + padded_len(n as usize) as u32,
                    ddp_results: vec![n],
                }
            }
            _ => ReplySizing {
                max_reply: REPLY_HDR,
                ddp_results: vec![],
            },
        }
    }

    /// ECHO takes one `opaque data<>`, DDP-eligible.
    fn call_ddp_positions(&self, proc_id: ProcId, call: &Bytes) -> Option<Vec<u32>> {
        match proc_id.proc_num {
            ECHO => rpcrdma::ulb::first_argument_position(call),
            _ => Some(Vec::new()),
        }
    }

    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        let Some(at) = rpcrdma::rpc::results_offset(reply) else {
            return Some(Vec::new());
        };
        Some(if proc_id.proc_num == ECHO {
            vec![at + 4]
        } else {
            Vec::new()
        })
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
    let stats = t.stats();
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
    for (n, calls) in [
        (0usize, 10),
        (1, 10),
        (100, 10),
        (3000, 10),
        (70_001, 10),
        (MAX_ECHO as usize, 5),
    ] {
        for _ in 0..calls {
            let data = pattern(n);
            let mut e = Encoder::new();
            e.ddp_opaque(data.clone());
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
        println!("ok echo n={n} calls={calls}");
    }
    // What the transport did: chunks registered (and fenced by deregistration on a
    // device that cannot invalidate), Read and Write chunks used.
    let s = stats
        .latest()
        .ok_or("no connection in the transport's statistics")?;
    println!(
        "ok stats read_chunks={} write_chunks={} registrations={} fenced_by_deregistration={} local_invalidations={} chunk_bytes_rx={}",
        s.get(Counter::ReadChunks),
        s.get(Counter::WriteChunks),
        s.get(Counter::Registrations),
        s.get(Counter::FencedByDeregistration),
        s.get(Counter::LocalInvalidations),
        s.get(Counter::ChunkBytesReceived),
    );
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

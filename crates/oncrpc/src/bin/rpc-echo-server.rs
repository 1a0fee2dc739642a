//! A test server: program 0x2000_0101 ("ECHO") versions 1 and 2, registered with
//! rpcbind, for the rpcinfo integration test and for manual checks.
//!
//! ```text
//! rpc-echo-server [--listen 0.0.0.0:0] [--rpcbind 127.0.0.1:111 | --no-rpcbind]
//!                 [--rpcbind-version 2|3|4]
//! ```
//!
//! Procedures: 0 NULL; 1 ECHO (`opaque<>` in, the same out). Prints
//! `listening on <addr>` once registered; SIGTERM or SIGINT shuts down gracefully
//! (in-flight calls finish, programs are unregistered), then prints `stopped`.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use oncrpc::{
    Dispatcher, Registrar, Request, RpcbindVersion, Server, ServerConfig, Service, ServiceError,
    ServiceResult,
};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use xdr::{Encoder, XdrStream};

/// The test program's number (in the 0x20000000 range RFC 5531 §8.3 leaves to users).
const ECHO_PROG: u32 = 0x2000_0101;

struct Echo;

impl Service for Echo {
    async fn call(&self, mut req: Request) -> ServiceResult {
        match req.proc_ {
            0 => Ok(XdrStream::default()),
            1 => {
                let data = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                let mut enc = Encoder::new();
                enc.ddp_opaque(data);
                Ok(enc.finish())
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("rpc-echo-server: {msg}\nusage: rpc-echo-server [--listen ADDR] [--rpcbind ADDR | --no-rpcbind] [--rpcbind-version 2|3|4]");
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let mut listen: SocketAddr = ([0, 0, 0, 0], 0).into();
    let mut registrar = Some(Registrar::local());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--listen" => match value("--listen").map(|v| v.parse()) {
                Ok(Ok(v)) => listen = v,
                _ => return usage("bad --listen"),
            },
            "--rpcbind" => match value("--rpcbind").map(|v| v.parse()) {
                Ok(Ok(v)) => registrar.get_or_insert_with(Registrar::local).addr = v,
                _ => return usage("bad --rpcbind"),
            },
            "--no-rpcbind" => registrar = None,
            "--rpcbind-version" => {
                let v = match value("--rpcbind-version").as_deref() {
                    Ok("2") => RpcbindVersion::Portmap2,
                    Ok("3") => RpcbindVersion::Rpcbind3,
                    Ok("4") => RpcbindVersion::Rpcbind4,
                    _ => return usage("bad --rpcbind-version"),
                };
                registrar.get_or_insert_with(Registrar::local).version = v;
            }
            other => return usage(&format!("unknown argument {other}")),
        }
    }
    let mut dispatcher = Dispatcher::new();
    if let Err(e) = dispatcher.register(ECHO_PROG, [1, 2], Arc::new(Echo)) {
        eprintln!("rpc-echo-server: {e}");
        return ExitCode::FAILURE;
    }
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rpc-echo-server: bind {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = listener.local_addr().ok();
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("rpc-echo-server: cannot install signal handlers");
            return ExitCode::FAILURE;
        }
    };
    let config = ServerConfig {
        rpcbind: registrar,
        ..ServerConfig::default()
    };
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let server = Server::new(dispatcher, config);
    let serve = server.serve_with_ready(
        listener,
        async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        },
        ready_tx,
    );
    let announce = async move {
        if ready_rx.await.is_ok() {
            if let Some(a) = local {
                println!("listening on {a}");
            }
        }
    };
    let (result, ()) = tokio::join!(serve, announce);
    match result {
        Ok(()) => {
            println!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rpc-echo-server: {e}");
            ExitCode::FAILURE
        }
    }
}

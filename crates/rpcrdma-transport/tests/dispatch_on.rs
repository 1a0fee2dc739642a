//! `RdmaServer::dispatch_on`: Calls run on the runtime named, not on the connections'
//! (nfsd keeps the threads that post to a verbs device free of its calls).

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use oncrpc::{Dispatcher, Request, Service, ServiceError};
use rpcrdma_transport::{RdmaConfig, RdmaServer};
use xdr::{Encoder, XdrStream};

/// Answers NULL, noting the name of the thread it ran on.
struct WhereAmI(Arc<Mutex<Vec<String>>>);

impl Service for WhereAmI {
    async fn call(&self, req: Request) -> Result<XdrStream, ServiceError> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.0.lock().unwrap().push(name);
        match req.proc_ {
            NULL => Ok(Encoder::new().finish()),
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

#[test]
fn calls_run_on_the_dispatch_runtime_and_replies_come_back() {
    let calls_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("calls")
        .enable_all()
        .build()
        .unwrap();
    let conn_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("connections")
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut d = Dispatcher::new();
    d.register(PROG, [VERS], Arc::new(WhereAmI(seen.clone())))
        .unwrap();
    let server = RdmaServer::new(
        iwarp(),
        Arc::new(d),
        Arc::new(TestBinding),
        RdmaConfig::default(),
    )
    .dispatch_on(calls_rt.handle().clone());
    let addr = conn_rt.block_on(async {
        let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = rdma::Listener::local_addr(&listener).unwrap();
        tokio::spawn(async move {
            let _ = server.serve(listener).await;
        });
        addr
    });
    conn_rt.block_on(async {
        let (c, _) = client(addr, RdmaConfig::default());
        for _ in 0..8 {
            c.call(PROG, VERS, NULL, Encoder::new().finish())
                .await
                .unwrap();
        }
    });
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8);
    assert!(seen.iter().all(|n| n == "calls"), "{seen:?}");
}

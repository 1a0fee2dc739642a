//! The listener reads MPA Requests concurrently: a peer that connects and stays
//! silent (or sends garbage) holds up no other peer's connection setup.

use std::time::Duration;

use iwarp::{HandshakeLimits, IwarpConfig, IwarpProvider};
use rdma::ConnectParams;
use tokio::io::AsyncWriteExt;

fn params() -> ConnectParams {
    ConnectParams {
        ird: 8,
        ord: 8,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_does_not_hold_up_the_next_connection() {
    let cfg = IwarpConfig {
        first_send_delay: Duration::ZERO,
        handshake: HandshakeLimits {
            request_timeout: Duration::from_secs(30),
            ..HandshakeLimits::default()
        },
        ..IwarpConfig::default()
    };
    let server = IwarpProvider::new(cfg.clone());
    let mut l = server.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    // First in the backlog: one peer that says nothing, one that sends half an MPA
    // Request and stops.
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    half.write_all(b"MPA ID Req").await.unwrap();
    let accept = tokio::spawn(async move {
        let req = l.accept().await.unwrap();
        req.accept(
            &rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE),
            params(),
        )
        .await
        .unwrap();
        l
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let connected = tokio::time::timeout(
        Duration::from_secs(5),
        IwarpProvider::new(cfg).connect(addr, &pd, params()),
    )
    .await;
    assert!(
        matches!(connected, Ok(Ok(_))),
        "a real peer waited behind silent ones (request_timeout 30 s)"
    );
    tokio::time::timeout(Duration::from_secs(5), accept)
        .await
        .expect("accept returned")
        .unwrap();
}

/// A device that registers memory itself, as a verbs device does: its protection
/// domains have no STag table, so this provider cannot resolve tagged accesses in them.
struct ForeignDevice;

#[allow(unsafe_code)] // the trait's method is unsafe to call; this one does nothing
impl rdma::Registrar for ForeignDevice {
    unsafe fn register(
        &self,
        _mem: &[u8],
        _access: rdma::Access,
    ) -> Result<Box<dyn rdma::DeviceRegistration>, rdma::RegisterError> {
        unreachable!("nothing is registered in this test")
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[tokio::test]
async fn a_protection_domain_of_another_provider_is_refused_before_the_handshake() {
    let foreign = rdma::ProtectionDomain::with_registrar(
        rdma::DeviceAttributes::SOFTWARE,
        std::sync::Arc::new(ForeignDevice),
    );
    let server = IwarpProvider::new(IwarpConfig::default());
    let l = server.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let refused = IwarpProvider::new(IwarpConfig::default())
        .connect(addr, &foreign, params())
        .await;
    assert!(
        matches!(refused, Err(rdma::ConnectError::InvalidParams(_))),
        "connect with a device's protection domain: {:?}",
        refused.err()
    );
}

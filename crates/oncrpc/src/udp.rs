//! A datagram server for small programs whose procedures are idempotent (the
//! portmapper): one call per datagram, one reply per datagram (RFC 5531 §10 leaves
//! record marking to stream transports), served one at a time in arrival order.
//!
//! What it does not do, and why that limits it to such programs: no duplicate
//! request cache, so a retransmitted call runs again (harmless only when running it
//! twice changes nothing); no fragmentation, so a call or a reply must fit one
//! datagram ([`MAX_DATAGRAM`]; a larger reply is dropped and logged); no
//! concurrency, so a slow procedure holds up the others.
//!
//! Why it exists: nfs-utils' mount.nfs asks the server's portmapper for MOUNT over
//! UDP first (three tries, a second apart, even when each gets ICMP port
//! unreachable) before it tries TCP, so a portmapper on TCP only costs a plain
//! `mount -t nfs` three seconds (lab scenario `nfs_plain_mounts`).

use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tokio::net::UdpSocket;

use crate::service::Dispatcher;

/// Largest call or reply: the largest UDP payload over IPv4 (65,535 - 8 - 20).
pub const MAX_DATAGRAM: usize = 65_507;

/// Serves the programs of `dispatcher` on `socket` until `shutdown` completes.
/// Errors receiving or sending one datagram are logged and do not stop the server
/// (an ICMP error from an earlier reply surfaces on the next receive).
pub async fn serve_udp(
    socket: UdpSocket,
    dispatcher: Arc<Dispatcher>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let local = socket.local_addr()?;
    tracing::info!(%local, programs = ?dispatcher.registrations(), "serving (udp)");
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    tokio::pin!(shutdown);
    loop {
        let (len, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive failed");
                    continue;
                }
            },
        };
        if len > MAX_DATAGRAM {
            tracing::debug!(%peer, "datagram larger than {MAX_DATAGRAM} bytes; dropped");
            continue;
        }
        // COPY: the call out of the receive buffer (small control calls only).
        let call = Bytes::copy_from_slice(&buf[..len]);
        let Some(reply) = dispatcher.dispatch(call).await else {
            continue;
        };
        let reply = reply.to_bytes();
        if reply.len() > MAX_DATAGRAM {
            tracing::warn!(%peer, len = reply.len(), "reply does not fit a datagram; dropped");
            continue;
        }
        if let Err(e) = socket.send_to(&reply, peer).await {
            tracing::debug!(%peer, error = %e, "udp send failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AcceptStat, CallHeader, ReplyBody, ReplyHeader, Xid};
    use crate::service::{Request, Service, ServiceResult};
    use crate::OpaqueAuth;
    use xdr::{Decoder, Encode, Encoder};

    /// Echoes its one u32 argument plus one.
    struct Inc;
    impl Service for Inc {
        async fn call(&self, req: Request) -> ServiceResult {
            let mut a = req.args;
            let n = a.u32()?;
            a.finish()?;
            let mut e = Encoder::new();
            e.u32(n + 1);
            Ok(e.finish())
        }
    }

    fn call(xid: u32, prog: u32, arg: u32) -> Vec<u8> {
        let mut e = Encoder::new();
        CallHeader::new(Xid(xid), prog, 1, 1, OpaqueAuth::none()).encode(&mut e);
        e.u32(arg);
        e.finish().to_bytes().to_vec()
    }

    async fn recv(client: &UdpSocket) -> (ReplyHeader, Decoder) {
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), client.recv(&mut buf))
            .await
            .expect("a reply within 5 s")
            .unwrap();
        let mut dec = Decoder::new(Bytes::copy_from_slice(&buf[..n]));
        let h = ReplyHeader::decode(&mut dec).unwrap();
        (h, dec)
    }

    #[tokio::test]
    async fn answers_each_datagram_with_one_reply_datagram_and_ignores_garbage() {
        let mut d = Dispatcher::new();
        d.register(400_123, [1], Arc::new(Inc)).unwrap();
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_udp(server, Arc::new(d), async {
            let _ = stopped.await;
        }));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.connect(addr).await.unwrap();
        // Not a call: no reply; the next call is still served.
        client.send(b"garbage").await.unwrap();
        client.send(&call(7, 400_123, 41)).await.unwrap();
        let (h, mut results) = recv(&client).await;
        assert_eq!(h.xid, Xid(7));
        assert!(matches!(h.body, ReplyBody::Accepted { .. }));
        assert_eq!(results.u32().unwrap(), 42);
        // An unknown program gets its RFC 5531 answer over UDP too.
        client.send(&call(8, 400_999, 1)).await.unwrap();
        let (h, _) = recv(&client).await;
        assert_eq!(h.xid, Xid(8));
        match h.body {
            ReplyBody::Accepted { status, .. } => {
                assert_eq!(status.stat(), AcceptStat::PROG_UNAVAIL)
            }
            other => panic!("not accepted: {other:?}"),
        }
        let _ = stop.send(());
        task.await.unwrap().unwrap();
    }
}

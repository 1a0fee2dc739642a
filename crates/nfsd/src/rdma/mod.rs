//! NFS version 3 over RPC-over-RDMA: the listener `nfsd` runs next to TCP.
//!
//! Specs: RFC 8267 (NFS Upper Layer Binding: §4.1 DDP-eligible items, §5 port
//! 20049 and "MOUNT ... not bound"), rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §11
//! (netids "rdma" and "rdma6").
//!
//! ```text
//!   client ──iWARP (MPA/DDP/RDMAP over TCP, userspace)──► RdmaServer (responder)
//!                                                             │ Nfs3Binding
//!                                   NFS-only oncrpc::Dispatcher (no MOUNT)
//!                                                             │
//!                                 NfsService ── the same NfsServer as TCP
//! ```
//!
//! The data path copies nothing here: READ3resok `data` is a DDP-eligible item
//! ([`xdr::Encoder::ddp_opaque`]) whose `Bytes` become the gather list of the RDMA
//! Write into the client's Write chunk (`rpcrdma_transport::server`); WRITE3args
//! `data` arrives by RDMA Read into a sink region and is handed to the dispatcher as
//! a slice (see the crate's copy count).
//!
//! # What this module does not do
//! It runs only the userspace iWARP provider (no rdma-core verbs yet). It issues no
//! backward-direction calls: NFSv3 has no callback program.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use iwarp::{HandshakeLimits, IwarpConfig, IwarpListener, IwarpProvider};
use nfs3::{NFS_PROGRAM, NFS_V3};
use oncrpc::rpcbind::Registrar;
use oncrpc::Dispatcher;
use rpcrdma_transport::{RdmaConfig, RdmaServer, StatsRegistry};

use crate::{NfsServer, NfsService};

pub use nfs3::rdma::{Nfs3Binding, NFS_ACL_PROGRAM};

/// How to serve NFS over RDMA.
#[derive(Debug, Clone)]
pub struct RdmaOptions {
    /// Where to listen (port 20049 by default, RFC 8267 §5).
    pub addr: SocketAddr,
    /// Ask for MPA CRC32c on every connection (RFC 5044 §7.2.3; Linux siw turns it
    /// on both ways when asked, docs/linux-facts.md). Off by default, as siw.
    pub crc: bool,
    /// Largest ULPDU we put in one FPDU (RFC 5044 MULPDU); `None` for the provider's
    /// default (65,516: fewest headers per byte). Peers accept any size; an FPDU that
    /// fits one TCP segment keeps packet analysers that assume FPDU alignment
    /// (tshark 4.0's MPA dissector) in step.
    pub max_ulpdu: Option<usize>,
    /// Limits on MPA handshakes in progress (TCP connected, MPA Request not yet
    /// complete): the deadline for the MPA Request, and caps per source address and
    /// in all, which drop the oldest handshake of the source at fault rather than
    /// stop accepting (defaults: 5 s, 16, 4096; [`HandshakeLimits`]).
    pub handshake: HandshakeLimits,
    /// Transport settings (inline thresholds, credits, message limits, versions).
    pub transport: RdmaConfig,
}

impl RdmaOptions {
    /// Defaults at `addr`: no CRC, 4 KiB inline both ways, 128 credits, both
    /// RPC-over-RDMA versions (see [`RdmaOptions::server_transport`]).
    pub fn new(addr: SocketAddr) -> Self {
        RdmaOptions {
            addr,
            crc: false,
            max_ulpdu: None,
            handshake: HandshakeLimits::default(),
            transport: RdmaOptions::server_transport(true),
        }
    }

    /// The transport settings of a server that accepts Version One only
    /// (`version_two: false`: a Version Two Call gets ERR_VERS 1-1), or both
    /// versions, answering each Call in its own and offering responder-provided Read
    /// chunks to Version Two clients that ask for them (rpcrdma-v2 §5.3,
    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05). Accepting Version Two changes
    /// nothing for a Version One client such as Linux: it never sends one.
    pub fn server_transport(version_two: bool) -> RdmaConfig {
        RdmaConfig {
            version_two,
            reliable_reply: version_two,
            ..RdmaConfig::default()
        }
    }
}

/// A bound NFS/RDMA listener, not yet serving.
pub struct RdmaListener {
    server: RdmaServer<IwarpProvider>,
    listener: IwarpListener,
    addr: SocketAddr,
    version_two: bool,
}

impl std::fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RdmaListener {
    /// Binds `opts.addr` for the NFS program of `nfs` (an NFS-only dispatcher:
    /// RFC 8267 binds no MOUNT).
    pub async fn bind(nfs: Arc<NfsServer>, opts: &RdmaOptions) -> io::Result<RdmaListener> {
        let mut d = Dispatcher::new();
        d.register(NFS_PROGRAM, [NFS_V3], Arc::new(NfsService::new(nfs)))
            .map_err(io::Error::other)?;
        let mut iwarp = IwarpConfig {
            crc: opts.crc,
            handshake: opts.handshake,
            ..IwarpConfig::default()
        };
        if let Some(n) = opts.max_ulpdu {
            iwarp.limits.max_ulpdu = n;
        }
        let provider = IwarpProvider::new(iwarp);
        let server = RdmaServer::new(
            provider,
            Arc::new(d),
            Arc::new(Nfs3Binding),
            opts.transport.clone(),
        );
        let listener = server.bind(opts.addr).await.map_err(|e| {
            io::Error::new(e.kind(), format!("NFS/RDMA listener on {}: {e}", opts.addr))
        })?;
        let addr = listener.local_addr()?;
        Ok(RdmaListener {
            server,
            listener,
            addr,
            version_two: opts.transport.version_two,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The RPC-over-RDMA versions served, for startup lines.
    pub fn versions(&self) -> &'static str {
        if self.version_two {
            "RPC-over-RDMA Versions One and Two"
        } else {
            "RPC-over-RDMA Version One"
        }
    }

    /// Every connection's transport counters (RDMA Reads and Writes, chunks, errors).
    pub fn stats(&self) -> StatsRegistry {
        self.server.stats()
    }

    /// Registers NFS with `registrar` under netid "rdma" ("rdma6" for IPv6, §11),
    /// serves until `shutdown` completes, then disconnects every connection and
    /// removes the registration. Calls in service when the connections close are
    /// dropped unanswered; the client retransmits them on its next connection.
    pub async fn serve(
        self,
        registrar: Option<Registrar>,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let RdmaListener {
            server,
            listener,
            addr,
            version_two: _,
        } = self;
        if let Some(r) = &registrar {
            server
                .register(r, addr)
                .await
                .map_err(|e| io::Error::other(format!("rpcbind (rdma): {e}")))?;
        }
        let result = tokio::select! {
            r = server.serve(listener) => r,
            () = shutdown => Ok(()),
        };
        server.shutdown();
        if let Some(r) = &registrar {
            let netid = if addr.is_ipv4() {
                rpcrdma_transport::NETID_RDMA
            } else {
                rpcrdma_transport::NETID_RDMA6
            };
            r.unset_all(&[(NFS_PROGRAM, NFS_V3)], netid, addr)
                .await
                .map_err(|e| io::Error::other(format!("rpcbind (rdma): {e}")))?;
        }
        result
    }
}

//! Choosing the transport under the NFS program: TCP with record marking (RFC 5531
//! §11), or RPC-over-RDMA (RFC 8166 / RFC 8267).
//!
//! Everything above this module talks to an [`oncrpc::Client`], which is the same
//! type whatever moves its messages: [`rpc_client`] picks `oncrpc`'s TCP transport or
//! `rpcrdma-transport`'s [`RdmaTransport`] (on rdma-core verbs or the userspace iWARP
//! provider, [`RdmaProvider`], with the NFSv3 binding of [`crate::rdma`]) and hands it
//! to `Client::new`.
//!
//! MOUNT always goes over TCP: RFC 8267 binds only NFS to RPC-over-RDMA ("MOUNT and
//! NLM are not bound to RDMA", see `nfs3::ulb`).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use std::sync::Arc;

use iwarp::{IwarpConfig, IwarpProvider};
use oncrpc::tcp::{TcpTransport, DEFAULT_MAX_RECORD};
use oncrpc::{Client, ClientConfig};
use rpcrdma_transport::{RdmaConfig, RdmaTransport, StatsRegistry};

use crate::error::Result;
use crate::rdma::Nfs3RdmaBinding;

/// Well-known NFS port over TCP (RFC 1813 §1.5 leaves it to the portmapper; 2049 is
/// what every server uses and Linux assumes).
pub const NFS_TCP_PORT: u16 = 2049;
/// RFC 8267 §5: NFS over RPC-over-RDMA listens on port 20049.
pub const NFS_RDMA_PORT: u16 = nfs3::ulb::NFS_RDMA_PORT;

/// Largest reply record the client accepts over TCP. READ replies are bounded by the
/// `rsize` chosen from FSINFO, which [`crate::Mount`] caps below this.
pub const MAX_REPLY_RECORD: usize = DEFAULT_MAX_RECORD;

/// Largest fragment the client sends: a WRITE of `wsize` bytes goes out as a single
/// fragment, so the server's record layer can hand the call on without joining
/// fragments (which would copy the data once more).
const MAX_SEND_FRAGMENT: usize = 0x7fff_ffff;

/// How NFS calls reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportKind {
    /// ONC RPC over TCP with record marking.
    #[default]
    Tcp,
    /// ONC RPC over RPC-over-RDMA Version One (the `rpcrdma` transport).
    Rdma,
}

impl TransportKind {
    /// The NFS port a server of this kind listens on by default.
    pub fn default_nfs_port(self) -> u16 {
        match self {
            TransportKind::Tcp => NFS_TCP_PORT,
            TransportKind::Rdma => NFS_RDMA_PORT,
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        })
    }
}

/// An unknown transport name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport (expected \"tcp\" or \"rdma\")")]
pub struct UnknownTransport;

impl FromStr for TransportKind {
    type Err = UnknownTransport;

    fn from_str(s: &str) -> Result<Self, UnknownTransport> {
        match s {
            "tcp" => Ok(TransportKind::Tcp),
            "rdma" => Ok(TransportKind::Rdma),
            _ => Err(UnknownTransport),
        }
    }
}

/// Which RDMA provider carries RPC-over-RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RdmaProvider {
    /// Verbs when rdma_cm resolves the server's address to a local RDMA device,
    /// else the userspace iWARP provider ([`choose_rdma_provider`]).
    #[default]
    Auto,
    /// rdma-core verbs (`crates/verbs`): an RDMA NIC, rxe or siw. Raises the
    /// process's locked-memory limit as far as it may (registration pins memory).
    Verbs,
    /// The userspace iWARP provider (MPA over a TCP socket; any host).
    Iwarp,
}

impl fmt::Display for RdmaProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RdmaProvider::Auto => "auto",
            RdmaProvider::Verbs => "verbs",
            RdmaProvider::Iwarp => "iwarp",
        })
    }
}

/// The provider to use for `server` (never [`RdmaProvider::Auto`]), and why, e.g.
/// `verbs on rxe0` or `userspace iWARP (no verbs: ...)`. Auto asks rdma_cm for a
/// route to the server (`rdma_resolve_addr`, which picks the local device as knfsd's
/// client does) and takes verbs if there is one.
pub async fn choose_rdma_provider(
    requested: RdmaProvider,
    server: SocketAddr,
) -> (RdmaProvider, String) {
    match requested {
        RdmaProvider::Iwarp => (RdmaProvider::Iwarp, "userspace iWARP".into()),
        RdmaProvider::Verbs => match verbs_route(server).await {
            Ok(device) => (RdmaProvider::Verbs, format!("verbs on {device}")),
            // Connecting will fail with the same reason, as the caller asked.
            Err(why) => (RdmaProvider::Verbs, format!("verbs (no route: {why})")),
        },
        RdmaProvider::Auto => match verbs_route(server).await {
            Ok(device) => (RdmaProvider::Verbs, format!("verbs on {device} (auto)")),
            Err(why) => (
                RdmaProvider::Iwarp,
                format!("userspace iWARP (auto: no verbs: {why})"),
            ),
        },
    }
}

/// The local RDMA device rdma_cm routes `server` through.
async fn verbs_route(server: SocketAddr) -> std::result::Result<String, String> {
    use ::rdma::{ConnectionManager, Route};
    let devices = verbs::devices().map_err(|e| e.to_string())?;
    if devices.is_empty() {
        return Err("no RDMA device on this host".into());
    }
    drop(devices);
    let route = verbs::VerbsCm::new()
        .resolve(server)
        .await
        .map_err(|e| e.to_string())?;
    let name = route.device().name().to_string();
    Ok(name)
}

/// An RPC client to `addr` over `kind`. Connects lazily, at the first call (and
/// reconnects by itself, retransmitting outstanding calls).
///
/// RDMA carries only NFSv3 (the binding of [`crate::rdma`]), with the default
/// [`RdmaConfig`] (4 KiB inline thresholds, 128 credits, as Linux offers) and
/// the iWARP provider's defaults.
///
/// Must be called inside a tokio runtime (the client spawns its driver task).
pub fn rpc_client(kind: TransportKind, addr: SocketAddr, config: ClientConfig) -> Result<Client> {
    rpc_client_with(
        kind,
        addr,
        config,
        &RdmaConfig::default(),
        RdmaProvider::Iwarp,
    )
    .map(|(c, _)| c)
}

/// Like [`rpc_client`], with the RPC-over-RDMA settings and provider given
/// (`Auto` is taken as userspace iWARP here: resolve it first with
/// [`choose_rdma_provider`]). Over RDMA, also returns the transport's
/// per-connection counters (RDMA Reads and Writes, chunk bytes, credits: what a
/// benchmark or `mountstats` reports).
pub fn rpc_client_with(
    kind: TransportKind,
    addr: SocketAddr,
    config: ClientConfig,
    rdma: &RdmaConfig,
    provider: RdmaProvider,
) -> Result<(Client, Option<StatsRegistry>)> {
    match kind {
        TransportKind::Tcp => {
            let transport = TcpTransport {
                addr,
                max_record: MAX_REPLY_RECORD,
                max_fragment: MAX_SEND_FRAGMENT,
            };
            Ok((Client::new(transport, config), None))
        }
        TransportKind::Rdma if provider == RdmaProvider::Verbs => {
            if let Err(e) = verbs::raise_locked_memory_limit() {
                tracing::warn!(error = %e, "cannot raise the locked-memory limit");
            }
            let transport = RdmaTransport::new(
                verbs::VerbsCm::new(),
                addr,
                rdma.clone(),
                Arc::new(Nfs3RdmaBinding),
            );
            let stats = transport.stats();
            Ok((Client::new(transport, config), Some(stats)))
        }
        TransportKind::Rdma => {
            let provider = IwarpProvider::new(IwarpConfig::default());
            let transport =
                RdmaTransport::new(provider, addr, rdma.clone(), Arc::new(Nfs3RdmaBinding));
            let stats = transport.stats();
            Ok((Client::new(transport, config), Some(stats)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names_round_trip() {
        for k in [TransportKind::Tcp, TransportKind::Rdma] {
            assert_eq!(k.to_string().parse::<TransportKind>(), Ok(k));
        }
        assert_eq!("udp".parse::<TransportKind>(), Err(UnknownTransport));
    }

    /// Auto falls back to userspace iWARP where verbs cannot reach the server (on
    /// a host without RDMA, as CI: the reason is verbs' own error) and says why;
    /// explicit choices are kept as asked.
    #[tokio::test]
    async fn auto_takes_iwarp_where_verbs_has_no_route_and_says_why() {
        let server: SocketAddr = "127.0.0.1:20049".parse().unwrap();
        let (p, why) = choose_rdma_provider(RdmaProvider::Auto, server).await;
        if let Err(e) = verbs::devices() {
            assert_eq!(p, RdmaProvider::Iwarp);
            assert_eq!(why, format!("userspace iWARP (auto: no verbs: {e})"));
        } else {
            assert!(why.starts_with(&format!("{p}")) || why.starts_with("userspace iWARP"));
        }
        for asked in [RdmaProvider::Verbs, RdmaProvider::Iwarp] {
            assert_eq!(choose_rdma_provider(asked, server).await.0, asked);
        }
    }

    #[test]
    fn rdma_port_is_rfc_8267s() {
        assert_eq!(TransportKind::Rdma.default_nfs_port(), 20049);
        assert_eq!(TransportKind::Tcp.default_nfs_port(), 2049);
    }
}

//! Choosing the transport under the NFS program: TCP with record marking (RFC 5531
//! §11), or RPC-over-RDMA (RFC 8166 / RFC 8267).
//!
//! Everything above this module talks to an [`oncrpc::Client`], which is the same
//! type whatever moves its messages: [`rpc_client`] picks `oncrpc`'s TCP transport or
//! `rpcrdma-transport`'s [`RdmaTransport`] (on the userspace iWARP provider, with the
//! NFSv3 binding of [`crate::rdma`]) and hands it to `Client::new`.
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

/// An RPC client to `addr` over `kind`. Connects lazily, at the first call (and
/// reconnects by itself, retransmitting outstanding calls).
///
/// RDMA carries only NFSv3 (the binding of [`crate::rdma`]), with the default
/// [`RdmaConfig`] (4 KiB inline thresholds, 128 credits, as Linux offers) and
/// the iWARP provider's defaults.
///
/// Must be called inside a tokio runtime (the client spawns its driver task).
pub fn rpc_client(kind: TransportKind, addr: SocketAddr, config: ClientConfig) -> Result<Client> {
    rpc_client_with(kind, addr, config, &RdmaConfig::default()).map(|(c, _)| c)
}

/// Like [`rpc_client`], with the RPC-over-RDMA settings given. Over RDMA, also
/// returns the transport's per-connection counters (RDMA Reads and Writes, chunk
/// bytes, credits: what a benchmark or `mountstats` reports).
pub fn rpc_client_with(
    kind: TransportKind,
    addr: SocketAddr,
    config: ClientConfig,
    rdma: &RdmaConfig,
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

    #[test]
    fn rdma_port_is_rfc_8267s() {
        assert_eq!(TransportKind::Rdma.default_nfs_port(), 20049);
        assert_eq!(TransportKind::Tcp.default_nfs_port(), 2049);
    }
}

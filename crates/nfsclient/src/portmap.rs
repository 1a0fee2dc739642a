//! Finding a program's port with the portmapper: PMAP version 2 `PMAPPROC_GETPORT`
//! (RFC 1833 §3.2), what a client does to find `mountd` on a Linux server.

use std::net::SocketAddr;

use oncrpc::rpcbind::{Mapping, IPPROTO_TCP, RPCBIND_PROG};
use oncrpc::{Client, ClientConfig, ClientError};

use crate::error::{Error, Result};
use crate::rpc;
use crate::transport::{rpc_client, TransportKind};

/// RFC 1833 §3: the portmapper listens on port 111.
pub const PORTMAP_PORT: u16 = 111;
/// RFC 1833 §3: PMAP program version 2.
const PMAP_V2: u32 = 2;
/// RFC 1833 §3.2: `PMAPPROC_GETPORT`.
const PMAPPROC_GETPORT: u32 = 3;

/// The TCP port of (`prog`, `vers`) on the portmapper at `portmapper`.
///
/// RFC 1833 §3.2: "A port value of zeros means the program has not been registered",
/// which is [`Error::NotRegistered`]. A refused connection (no rpcbind on the server)
/// is [`Error::NoPortmapper`] at once: `config` is used with
/// [`ClientConfig::fail_if_unreachable`] set.
pub async fn getport(
    portmapper: SocketAddr,
    prog: u32,
    vers: u32,
    config: ClientConfig,
) -> Result<u16> {
    let config = ClientConfig {
        fail_if_unreachable: true,
        ..config
    };
    let client: Client = rpc_client(TransportKind::Tcp, portmapper, config)?;
    let mapping = Mapping {
        prog,
        vers,
        prot: IPPROTO_TCP,
        port: 0,
    };
    let port: u32 = rpc::call(
        &client,
        RPCBIND_PROG,
        PMAP_V2,
        PMAPPROC_GETPORT,
        "PMAP GETPORT",
        &mapping,
    )
    .await
    .map_err(|e| match e {
        Error::Rpc {
            source: ClientError::Connect(source),
            ..
        } => Error::NoPortmapper {
            addr: portmapper,
            source,
        },
        other => other,
    })?;
    match u16::try_from(port) {
        Ok(0) => Err(Error::NotRegistered { prog, vers }),
        Ok(p) => Ok(p),
        Err(_) => Err(Error::Protocol(crate::error::ProtocolViolation::BadPort)),
    }
}

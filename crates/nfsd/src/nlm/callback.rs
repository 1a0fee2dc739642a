//! Calls from the server to a client: NLM GRANTED (and the `_RES` answers of the
//! `_MSG` procedures) to the client's lock manager, SM_NOTIFY to its status monitor.
//!
//! The port comes from the client host's portmapper (PORTMAP v2 GETPORT, RFC 1833
//! §3.2, over TCP), as Linux lockd finds a client's NLM service: the Linux client's
//! lockd and rpc.statd register with the client's rpcbind. Calls go over TCP (the
//! Linux client's lockd serves NLM on TCP and UDP; statd on both).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use oncrpc::{Client, ClientConfig, ClientError, TcpTransport};
use xdr::{Decoder, Encoder, XdrStream};

/// How long one portmapper lookup or one callback may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a callback failed.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    /// The client's portmapper did not answer, or knows no such program on TCP.
    #[error("portmapper of {0}: {1}")]
    Portmap(SocketAddr, String),
    /// The call failed.
    #[error("call to {0}: {1}")]
    Call(SocketAddr, ClientError),
}

fn client(addr: SocketAddr) -> Client {
    Client::new(
        TcpTransport::new(addr),
        ClientConfig {
            timeout: CALL_TIMEOUT,
            fail_if_unreachable: true,
            ..ClientConfig::default()
        },
    )
}

/// Calls `proc_` of (`prog`, `vers`) on host `ip`, whose portmapper listens on
/// `portmap_port` (111 but behind NAT port forwarding); returns the results.
pub async fn call_client(
    ip: IpAddr,
    portmap_port: u16,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: XdrStream,
) -> Result<Decoder, CallbackError> {
    let pm = SocketAddr::new(ip, portmap_port);
    // RFC 1833 §3: PMAPPROC_GETPORT(mapping{prog, vers, IPPROTO_TCP, 0}) -> port.
    let mut e = Encoder::new();
    e.u32(prog).u32(vers).u32(6).u32(0);
    let mut reply = client(pm)
        .call(100_000, 2, 3, e.finish())
        .await
        .map_err(|e| CallbackError::Portmap(pm, e.to_string()))?;
    let port = reply
        .results
        .u32()
        .map_err(|e| CallbackError::Portmap(pm, e.to_string()))?;
    let port = match u16::try_from(port) {
        Ok(p) if p != 0 => p,
        _ => {
            return Err(CallbackError::Portmap(
                pm,
                format!("program {prog} version {vers} not registered on tcp"),
            ))
        }
    };
    let addr = SocketAddr::new(ip, port);
    let reply = client(addr)
        .call(prog, vers, proc_, args)
        .await
        .map_err(|e| CallbackError::Call(addr, e))?;
    Ok(reply.results)
}

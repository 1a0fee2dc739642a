//! Registration with rpcbind / the portmapper.
//!
//! Specs: RFC 1833 §2 (RPCBIND versions 3 and 4: `RPCBPROC_SET` = 1,
//! `RPCBPROC_UNSET` = 2, `struct rpcb`) and §3 (PORTMAP version 2: `PMAPPROC_SET` = 1,
//! `PMAPPROC_UNSET` = 2, `struct mapping`). Program 100000 on port 111.
//!
//! A server registers each (program, version) it serves for one netid ("tcp" here;
//! the RDMA transport registers "rdma") at its universal address, and unregisters at
//! shutdown. Before each SET we UNSET, so that a registration left by an earlier run
//! that crashed does not make rpcbind refuse the new one.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use xdr::{Encode, Encoder};

use crate::client::{Client, ClientConfig, ClientError};
use crate::tcp::TcpTransport;

/// RFC 1833: the rpcbind / portmapper program number.
pub const RPCBIND_PROG: u32 = 100_000;
/// RFC 1833 §3: `PMAPPROC_SET`, also RPCBPROC_SET (§2.2) in versions 3 and 4.
pub const PROC_SET: u32 = 1;
/// RFC 1833 §3: `PMAPPROC_UNSET`, also RPCBPROC_UNSET in versions 3 and 4.
pub const PROC_UNSET: u32 = 2;
/// RFC 1833 §3: `IPPROTO_TCP = 6`, the protocol of a `mapping`.
pub const IPPROTO_TCP: u32 = 6;
/// The netid of ONC RPC over TCP over IPv4.
pub const NETID_TCP: &str = "tcp";
/// The netid of ONC RPC over TCP over IPv6.
pub const NETID_TCP6: &str = "tcp6";
/// The netid of RPC-over-RDMA (RFC 8166 §12: "rdma").
pub const NETID_RDMA: &str = "rdma";

/// Which protocol to register with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcbindVersion {
    /// PORTMAP version 2 (`PMAPPROC_SET` with a port; TCP only).
    Portmap2,
    /// RPCBIND version 3 (`RPCBPROC_SET` with netid and universal address).
    Rpcbind3,
    /// RPCBIND version 4.
    Rpcbind4,
}

impl RpcbindVersion {
    fn number(self) -> u32 {
        match self {
            RpcbindVersion::Portmap2 => 2,
            RpcbindVersion::Rpcbind3 => 3,
            RpcbindVersion::Rpcbind4 => 4,
        }
    }
}

/// Why registration failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The call to rpcbind failed.
    #[error("rpcbind call failed: {0}")]
    Call(#[from] ClientError),
    /// rpcbind answered FALSE to a SET.
    #[error("rpcbind refused to register program {prog} version {vers}")]
    Refused {
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
    },
    /// The result is not an XDR boolean.
    #[error("malformed rpcbind reply: {0}")]
    BadResult(#[from] xdr::XdrError),
    /// PORTMAP version 2 only knows TCP and UDP over IPv4.
    #[error("netid {0} cannot be registered with PORTMAP version 2")]
    NetidNotPortmap(String),
}

impl From<RegisterError> for io::Error {
    fn from(e: RegisterError) -> io::Error {
        io::Error::other(e)
    }
}

/// Registers and unregisters programs with one rpcbind.
#[derive(Debug, Clone)]
pub struct Registrar {
    /// Address of rpcbind, normally 127.0.0.1:111.
    pub addr: SocketAddr,
    /// Protocol version to use.
    pub version: RpcbindVersion,
    /// Timeout of each call to rpcbind.
    pub timeout: Duration,
}

impl Registrar {
    /// The local rpcbind at 127.0.0.1:111, RPCBIND version 4.
    pub fn local() -> Self {
        Registrar {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 111),
            version: RpcbindVersion::Rpcbind4,
            timeout: Duration::from_secs(5),
        }
    }

    /// Registers every (program, version) of `regs` for `netid` at `addr`, each
    /// after unregistering any earlier entry.
    pub async fn set_all(
        &self,
        regs: &[(u32, u32)],
        netid: &str,
        addr: SocketAddr,
    ) -> Result<(), RegisterError> {
        let client = self.client();
        for &(prog, vers) in regs {
            self.call(&client, PROC_UNSET, prog, vers, netid, addr)
                .await?;
            if !self
                .call(&client, PROC_SET, prog, vers, netid, addr)
                .await?
            {
                return Err(RegisterError::Refused { prog, vers });
            }
            tracing::info!(prog, vers, netid, %addr, rpcbind = ?self.version, "registered");
        }
        Ok(())
    }

    /// Unregisters every (program, version) of `regs` for `netid`. An UNSET that
    /// rpcbind answers FALSE (nothing was registered) is not an error.
    pub async fn unset_all(
        &self,
        regs: &[(u32, u32)],
        netid: &str,
        addr: SocketAddr,
    ) -> Result<(), RegisterError> {
        let client = self.client();
        for &(prog, vers) in regs {
            let done = self
                .call(&client, PROC_UNSET, prog, vers, netid, addr)
                .await?;
            tracing::info!(prog, vers, netid, done, "unregistered");
        }
        Ok(())
    }

    fn client(&self) -> Client {
        Client::new(
            TcpTransport::new(self.addr),
            ClientConfig {
                timeout: self.timeout,
                // No rpcbind listening is an answer: say so now, not after the timeout.
                fail_if_unreachable: true,
                ..ClientConfig::default()
            },
        )
    }

    async fn call(
        &self,
        client: &Client,
        proc_: u32,
        prog: u32,
        vers: u32,
        netid: &str,
        addr: SocketAddr,
    ) -> Result<bool, RegisterError> {
        let args = match self.version {
            RpcbindVersion::Portmap2 => {
                if netid != NETID_TCP {
                    return Err(RegisterError::NetidNotPortmap(netid.to_owned()));
                }
                Mapping {
                    prog,
                    vers,
                    prot: IPPROTO_TCP,
                    port: u32::from(addr.port()),
                }
                .to_xdr()
            }
            RpcbindVersion::Rpcbind3 | RpcbindVersion::Rpcbind4 => Rpcb {
                prog,
                vers,
                netid: Bytes::copy_from_slice(netid.as_bytes()),
                addr: Bytes::from(universal_address(addr)),
                owner: Bytes::from_static(b"oncrpc"),
            }
            .to_xdr(),
        };
        let mut reply = client
            .call(RPCBIND_PROG, self.version.number(), proc_, args)
            .await?;
        Ok(reply.results.bool()?)
    }
}

/// RFC 1833 §3: `struct mapping { unsigned int prog; unsigned int vers; unsigned int
/// prot; unsigned int port; }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Protocol (6 = TCP, 17 = UDP).
    pub prot: u32,
    /// Port.
    pub port: u32,
}

impl Encode for Mapping {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.prog)
            .u32(self.vers)
            .u32(self.prot)
            .u32(self.port);
    }
}

/// RFC 1833 §2.1: `struct rpcb { unsigned long r_prog; unsigned long r_vers; string
/// r_netid<>; string r_addr<>; string r_owner<>; }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rpcb {
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Network id ("tcp", "tcp6", "rdma").
    pub netid: Bytes,
    /// Universal address.
    pub addr: Bytes,
    /// Owner of the service.
    pub owner: Bytes,
}

impl Encode for Rpcb {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.prog).u32(self.vers);
        enc.string(&self.netid)
            .string(&self.addr)
            .string(&self.owner);
    }
}

/// RFC 5665 §5.2.3.3 (IPv4) and §5.2.3.4 (IPv6): the universal address
/// "h1.h2.h3.h4.p1.p2", where p1 and p2 are the high and low bytes of the port.
pub fn universal_address(addr: SocketAddr) -> String {
    let port = addr.port();
    format!("{}.{}.{}", addr.ip(), port >> 8, port & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_address_splits_port_into_two_octets() {
        let a: SocketAddr = "127.0.0.1:2049".parse().unwrap();
        assert_eq!(universal_address(a), "127.0.0.1.8.1");
        let b: SocketAddr = "[::1]:111".parse().unwrap();
        assert_eq!(universal_address(b), "::1.0.111");
    }

    #[test]
    fn mapping_encodes_four_words() {
        let m = Mapping {
            prog: 100_003,
            vers: 3,
            prot: IPPROTO_TCP,
            port: 2049,
        };
        assert_eq!(
            &m.to_xdr().to_bytes()[..],
            &[0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0, 8, 1]
        );
    }

    #[test]
    fn rpcb_encodes_strings_padded() {
        let r = Rpcb {
            prog: 1,
            vers: 2,
            netid: Bytes::from_static(b"tcp"),
            addr: Bytes::from_static(b"a"),
            owner: Bytes::new(),
        };
        assert_eq!(
            &r.to_xdr().to_bytes()[..],
            &[
                0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, b't', b'c', b'p', 0, 0, 0, 0, 1, b'a', 0, 0, 0,
                0, 0, 0, 0
            ]
        );
    }

    #[tokio::test]
    async fn unreachable_rpcbind_is_a_connect_error_at_once() {
        let r = Registrar {
            addr: "127.0.0.1:1".parse().unwrap(),
            timeout: Duration::from_secs(30),
            ..Registrar::local()
        };
        let started = std::time::Instant::now();
        let err = r
            .set_all(&[(1, 1)], NETID_TCP, "127.0.0.1:2".parse().unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RegisterError::Call(ClientError::Connect(e))
                if e.kind() == io::ErrorKind::ConnectionRefused),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn portmap2_refuses_non_tcp_netid() {
        let r = Registrar {
            version: RpcbindVersion::Portmap2,
            ..Registrar::local()
        };
        let err = r
            .set_all(&[(1, 1)], NETID_RDMA, "127.0.0.1:1".parse().unwrap())
            .await
            .unwrap_err();
        assert!(matches!(err, RegisterError::NetidNotPortmap(_)));
    }
}

//! A minimal, read-only portmapper for hosts without rpcbind (RFC 1833).
//!
//! Answers PORTMAP version 2 (§3: NULL, GETPORT, DUMP; SET and UNSET are refused
//! with FALSE) and RPCBIND versions 3 and 4 (§2: NULL, GETADDR, DUMP) for this
//! server's own programs, so that clients which ask the portmapper (a Linux
//! `mount -t nfs` without `port=`/`mountport=`, `rpcinfo -p`) find them.
//!
//! Served on TCP and UDP (the server binds both). MOUNT itself is served on TCP only,
//! and nothing more is needed for Linux NFSv3 mounts over TCP or RDMA: the kernel
//! calls MOUNT over TCP for both (fs/nfs/fs_context.c,
//! `nfs_set_mount_transport_protocol`) and asks the portmapper over TCP; mount.nfs
//! asks for MOUNT over UDP first, takes our 0 ("not registered", §3.2) and asks for
//! TCP (lab scenario `nfs_plain_mounts`).

use std::net::SocketAddr;

use oncrpc::{Request, Service, ServiceError, ServiceResult};
use xdr::{Bytes, Encoder};

/// Program number of the portmapper / rpcbind.
pub const PMAP_PROGRAM: u32 = 100_000;

/// One registration: program, version, netid and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Netid ("tcp", "rdma").
    pub netid: &'static str,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Registration {
    /// RFC 1833 §3 protocol number: 6 for TCP, 17 for UDP (RDMA has none in
    /// PORTMAP v2).
    fn prot(&self) -> Option<u32> {
        match self.netid {
            "tcp" => Some(6),
            "udp" => Some(17),
            _ => None,
        }
    }
}

/// The portmapper service, with a fixed table.
#[derive(Debug, Clone)]
pub struct Portmapper {
    table: Vec<Registration>,
}

impl Portmapper {
    /// A portmapper that knows `table` (its own registrations, TCP and UDP at
    /// `own`, are added).
    pub fn new(mut table: Vec<Registration>, own: SocketAddr) -> Self {
        for netid in ["tcp", "udp"] {
            for vers in [2, 3, 4] {
                table.push(Registration {
                    prog: PMAP_PROGRAM,
                    vers,
                    netid,
                    addr: own,
                });
            }
        }
        Portmapper { table }
    }

    fn getport(&self, prog: u32, vers: u32, prot: u32) -> u32 {
        self.table
            .iter()
            .find(|r| r.prog == prog && r.vers == vers && r.prot() == Some(prot))
            .map_or(0, |r| u32::from(r.addr.port()))
    }

    fn getaddr(&self, prog: u32, vers: u32, netid: &[u8]) -> String {
        self.table
            .iter()
            .find(|r| r.prog == prog && r.vers == vers && r.netid.as_bytes() == netid)
            .map_or(String::new(), |r| {
                oncrpc::rpcbind::universal_address(r.addr)
            })
    }
}

impl Service for Portmapper {
    async fn call(&self, req: Request) -> ServiceResult {
        let mut a = req.args;
        let mut enc = Encoder::new();
        match (req.vers, req.proc_) {
            (_, 0) => a.finish()?,
            // PMAPPROC_SET / UNSET, RPCBPROC_SET / UNSET: refused (read-only table).
            (_, 1) | (_, 2) => {
                enc.bool(false);
            }
            // PMAPPROC_GETPORT(mapping) -> port.
            (2, 3) => {
                let (prog, vers, prot, _port) = (a.u32()?, a.u32()?, a.u32()?, a.u32()?);
                a.finish()?;
                enc.u32(self.getport(prog, vers, prot));
            }
            // PMAPPROC_DUMP -> *pmaplist.
            (2, 4) => {
                a.finish()?;
                let maps: Vec<&Registration> =
                    self.table.iter().filter(|r| r.prot().is_some()).collect();
                enc.list(&maps, |e, r| {
                    e.u32(r.prog)
                        .u32(r.vers)
                        .u32(r.prot().unwrap_or(6))
                        .u32(u32::from(r.addr.port()));
                });
            }
            // RPCBPROC_GETADDR(rpcb) -> uaddr.
            (3 | 4, 3) => {
                let (prog, vers) = (a.u32()?, a.u32()?);
                let netid = a.string(255)?;
                let _addr = a.string(255)?;
                let _owner = a.string(255)?;
                a.finish()?;
                enc.string(self.getaddr(prog, vers, &netid).as_bytes());
            }
            // RPCBPROC_DUMP -> *rp__list.
            (3 | 4, 4) => {
                a.finish()?;
                enc.list(&self.table, |e, r| {
                    e.u32(r.prog).u32(r.vers);
                    e.string(r.netid.as_bytes());
                    e.string(oncrpc::rpcbind::universal_address(r.addr).as_bytes());
                    e.string(&Bytes::from_static(b"nfsd"));
                });
            }
            _ => return Err(ServiceError::ProcUnavail),
        }
        Ok(enc.finish())
    }
}

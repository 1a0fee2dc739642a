//! The Upper-Layer Bindings of what the NFS/RDMA listener serves, as one: NFSv3 (and
//! NFS_ACL v3, [`Nfs3Binding`]) and, when NFSv4 is served, NFSv4 ([`Nfs4Binding`],
//! RFC 8267 §5), each asked about the calls of its own versions. Without NFSv4 the
//! listener binds as it did before it (NFSv3 only).

use bytes::Bytes;
use nfs3::rdma::Nfs3Binding;
use nfs4::rdma::Nfs4Binding;
use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use xdr::XdrStream;

/// NFSv3 and NFSv4 on one listener.
#[derive(Debug)]
pub struct NfsBinding {
    v3: Nfs3Binding,
    v4: Option<Nfs4Binding>,
}

impl NfsBinding {
    /// NFSv3's binding, and NFSv4's if `v4`.
    pub fn new(v4: bool) -> NfsBinding {
        NfsBinding {
            v3: Nfs3Binding,
            v4: v4.then(Nfs4Binding::default),
        }
    }

    /// The binding of `prog`/`vers`, if either binds it.
    fn of(&self, prog: u32, vers: u32) -> Option<&dyn UpperLayerBinding> {
        match &self.v4 {
            Some(v4) if v4.binds(prog, vers) => return Some(v4),
            _ => {}
        }
        if self.v3.binds(prog, vers) {
            Some(&self.v3)
        } else {
            None
        }
    }
}

impl UpperLayerBinding for NfsBinding {
    fn binds(&self, prog: u32, vers: u32) -> bool {
        self.of(prog, vers).is_some()
    }

    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing {
        match self.of(proc_id.prog, proc_id.vers) {
            Some(b) => b.reply_sizing(proc_id, call),
            None => ReplySizing::default(),
        }
    }

    fn call_ddp_positions(&self, proc_id: ProcId, call: &Bytes) -> Option<Vec<u32>> {
        self.of(proc_id.prog, proc_id.vers)?
            .call_ddp_positions(proc_id, call)
    }

    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        self.of(proc_id.prog, proc_id.vers)?
            .reply_ddp_offsets(proc_id, reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_nfs3_and_nfs4_and_nothing_else() {
        assert!(!NfsBinding::new(false).binds(100_003, 4));
        let b = NfsBinding::new(true);
        assert!(b.binds(100_003, 3));
        assert!(b.binds(100_003, 4));
        assert!(b.binds(nfs3::rdma::NFS_ACL_PROGRAM, 3));
        assert!(!b.binds(100_003, 2));
        assert!(!b.binds(100_005, 3), "MOUNT is not bound (RFC 8267)");
    }
}

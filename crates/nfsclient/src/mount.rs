//! MOUNT version 3 (RFC 1813 Appendix I): getting an export's root file handle.
//!
//! MOUNT runs over TCP whatever carries NFS (RFC 8267 binds only NFS to RDMA).

use nfs3::mount::{DirPath, Exports, MountProc3, MountRes3};
use nfs3::{NfsFh3, Void, MOUNT_PROGRAM, MOUNT_V3};
use oncrpc::Client;
use xdr::Bytes;

use crate::error::{Error, Result};
use crate::rpc;

/// A MOUNT v3 client.
#[derive(Debug, Clone)]
pub struct MountClient {
    rpc: Client,
}

/// The answer to MNT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// The export's root handle (Appendix I `fhandle3`).
    pub root: NfsFh3,
    /// Authentication flavors the server accepts for this export, most preferred first.
    pub auth_flavors: Vec<u32>,
}

impl MountClient {
    /// A MOUNT client over an RPC client connected to the server's `mountd`.
    pub fn new(rpc: Client) -> Self {
        MountClient { rpc }
    }

    /// MOUNTPROC3_NULL.
    pub async fn null(&self) -> Result<()> {
        let Void = self.call(MountProc3::NULL, "MOUNT NULL", &Void).await?;
        Ok(())
    }

    /// MOUNTPROC3_MNT: the root handle of `path`. A status other than MNT3_OK is
    /// [`Error::Mount`].
    pub async fn mnt(&self, path: &[u8]) -> Result<Mounted> {
        let arg = DirPath(Bytes::copy_from_slice(path));
        match self.call(MountProc3::MNT, "MOUNT MNT", &arg).await? {
            MountRes3::Ok {
                fhandle,
                auth_flavors,
            } => Ok(Mounted {
                root: NfsFh3(fhandle),
                auth_flavors,
            }),
            MountRes3::Fail(status) => Err(Error::Mount(status)),
        }
    }

    /// MOUNTPROC3_UMNT: tells the server this client no longer uses `path`.
    pub async fn umnt(&self, path: &[u8]) -> Result<()> {
        let arg = DirPath(Bytes::copy_from_slice(path));
        let Void = self.call(MountProc3::UMNT, "MOUNT UMNT", &arg).await?;
        Ok(())
    }

    /// MOUNTPROC3_EXPORT: the server's export list.
    pub async fn exports(&self) -> Result<Exports> {
        self.call(MountProc3::EXPORT, "MOUNT EXPORT", &Void).await
    }

    async fn call<A: xdr::Encode, R: xdr::Decode>(
        &self,
        proc_: MountProc3,
        what: &'static str,
        args: &A,
    ) -> Result<R> {
        rpc::call(&self.rpc, MOUNT_PROGRAM, MOUNT_V3, proc_.0, what, args).await
    }
}

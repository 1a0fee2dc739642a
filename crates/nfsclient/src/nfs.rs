//! Typed NFSv3 procedures (RFC 1813 §3.3): one async method per procedure, taking
//! file handles and names and returning the procedure's `resok` structure.
//!
//! A status other than NFS3_OK is [`Error::Nfs`] with the procedure and the
//! `nfsstat3`; the `resfail` arm (wcc data, post-op attributes) is dropped. Each
//! method is one RPC: no caching, no retries beyond the RPC client's retransmission
//! after a reconnect. Higher-level helpers (path walking, pipelined I/O, directory
//! iteration) live in [`crate::Mount`], [`crate::io`] and [`crate::readdir`].
//!
//! Copies: names and symlink targets given as `&[u8]` are copied once into a
//! `Bytes` (metadata, not the data path). WRITE data is taken as [`Bytes`] and sent
//! as a DDP-eligible item without a copy; READ data comes back as a slice of the
//! received reply, without a copy.

use std::net::SocketAddr;

use nfs3::attr::{Access3Args, Access3ResOk, GetAttr3Args, GetAttr3ResOk, ObjAttrFail};
use nfs3::attr::{SetAttr3Args, SetAttr3Wcc};
use nfs3::dir::{
    Create3Args, Create3ResOk, CreateHow3, DirWcc, Link3Args, Link3Wcc, Lookup3Args,
    Lookup3ResFail, Lookup3ResOk, MkDir3Args, Mknod3Args, MknodData3, ReadLink3Args,
    ReadLink3ResOk, Remove3Args, Rename3Args, Rename3Wcc, Symlink3Args, SymlinkData3,
};
use nfs3::fs::{FsInfo3ResOk, FsRootArgs, FsStat3ResOk, PathConf3ResOk};
use nfs3::io::{
    Commit3Args, Commit3ResOk, FileWcc, Read3Args, Read3ResOk, Write3Args, Write3ResOk,
};
use nfs3::readdir::{ReadDir3Args, ReadDir3ResOk, ReadDirPlus3Args, ReadDirPlus3ResOk};
use nfs3::{
    CookieVerf3, DdpData, DirOpArgs3, Fattr3, Filename3, NfsFh3, NfsPath3, NfsProc3, NfsResult,
    NfsTime3, Sattr3, StableHow, Void, WccData, NFS_PROGRAM, NFS_V3,
};
use oncrpc::{Client, ClientConfig};
use xdr::{Bytes, Decode, Encode};

use crate::error::{Error, ProtocolViolation, Result};
use crate::rpc;
use crate::transport::{rpc_client, TransportKind};

/// An NFSv3 client: the typed procedures over one RPC client. Cheap to clone; clones
/// share the connection and can have calls in flight at the same time.
#[derive(Debug, Clone)]
pub struct NfsClient {
    rpc: Client,
}

fn dirop(dir: &NfsFh3, name: &[u8]) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        // COPY: the name (metadata), once.
        name: Filename3(Bytes::copy_from_slice(name)),
    }
}

impl NfsClient {
    /// NFSv3 over an existing RPC client.
    pub fn new(rpc: Client) -> Self {
        NfsClient { rpc }
    }

    /// NFSv3 at `addr` over `kind` (connects at the first call).
    pub fn connect(kind: TransportKind, addr: SocketAddr, config: ClientConfig) -> Result<Self> {
        rpc_client(kind, addr, config).map(NfsClient::new)
    }

    /// The RPC client underneath.
    pub fn rpc(&self) -> &Client {
        &self.rpc
    }

    /// Calls `proc` and maps `NfsResult::Fail` to [`Error::Nfs`].
    async fn call<A: Encode, T: Decode, F: Decode>(&self, proc: NfsProc3, args: &A) -> Result<T> {
        let res: NfsResult<T, F> =
            rpc::call(&self.rpc, NFS_PROGRAM, NFS_V3, proc.0, what(proc), args).await?;
        match res {
            NfsResult::Ok(ok) => Ok(ok),
            NfsResult::Fail(status, _) => Err(Error::Nfs { proc, status }),
        }
    }

    /// §3.3.0 NULL: a round trip that does nothing (liveness, latency).
    pub async fn null(&self) -> Result<()> {
        let Void = rpc::call(&self.rpc, NFS_PROGRAM, NFS_V3, 0, "NFS NULL", &Void).await?;
        Ok(())
    }

    /// §3.3.1 GETATTR.
    pub async fn getattr(&self, object: &NfsFh3) -> Result<Fattr3> {
        let args = GetAttr3Args {
            object: object.clone(),
        };
        let ok: GetAttr3ResOk = self.call::<_, _, Void>(NfsProc3::GETATTR, &args).await?;
        Ok(ok.obj_attributes)
    }

    /// §3.3.2 SETATTR. With `guard`, the server sets nothing unless the object's
    /// ctime equals it (else NFS3ERR_NOT_SYNC).
    pub async fn setattr(
        &self,
        object: &NfsFh3,
        new_attributes: &Sattr3,
        guard: Option<NfsTime3>,
    ) -> Result<WccData> {
        let args = SetAttr3Args {
            object: object.clone(),
            new_attributes: new_attributes.clone(),
            guard,
        };
        let ok: SetAttr3Wcc = self
            .call::<_, _, SetAttr3Wcc>(NfsProc3::SETATTR, &args)
            .await?;
        Ok(ok.obj_wcc)
    }

    /// §3.3.3 LOOKUP of one name in `dir`.
    pub async fn lookup(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<Lookup3ResOk> {
        let args = Lookup3Args {
            what: dirop(dir, name.as_ref()),
        };
        self.call::<_, _, Lookup3ResFail>(NfsProc3::LOOKUP, &args)
            .await
    }

    /// §3.3.4 ACCESS: which of the `access` bits ([`nfs3::attr::access`]) the caller has.
    pub async fn access(&self, object: &NfsFh3, access: u32) -> Result<Access3ResOk> {
        let args = Access3Args {
            object: object.clone(),
            access,
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::ACCESS, &args)
            .await
    }

    /// §3.3.5 READLINK.
    pub async fn readlink(&self, symlink: &NfsFh3) -> Result<ReadLink3ResOk> {
        let args = ReadLink3Args {
            symlink: symlink.clone(),
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::READLINK, &args)
            .await
    }

    /// §3.3.6 READ of at most `count` bytes at `offset`. The data is a slice of the
    /// reply buffer (no copy).
    ///
    /// §3.3.6: "count: The number of bytes of data returned by the read", which is
    /// checked against the data's length and against the `count` asked for.
    pub async fn read(&self, file: &NfsFh3, offset: u64, count: u32) -> Result<Read3ResOk> {
        let args = Read3Args {
            file: file.clone(),
            offset,
            count,
        };
        let ok: Read3ResOk = self
            .call::<_, _, ObjAttrFail>(NfsProc3::READ, &args)
            .await?;
        if ok.count as usize != ok.data.0.len() || ok.count > count {
            return Err(Error::Protocol(ProtocolViolation::ReadCount));
        }
        Ok(ok)
    }

    /// §3.3.7 WRITE of `data` at `offset` with stability `stable`.
    ///
    /// The data is sent as a DDP-eligible item (RFC 8267 §4.1) without a copy. The
    /// server may write fewer bytes than sent (`count` in the result); a `count`
    /// above the data sent is [`ProtocolViolation::WriteCount`].
    pub async fn write(
        &self,
        file: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<Write3ResOk> {
        let sent = data.len();
        let args = Write3Args {
            file: file.clone(),
            offset,
            count: u32::try_from(sent)
                .map_err(|_| Error::InvalidArgument("WRITE of 4 GiB or more"))?,
            stable,
            data: DdpData(data),
        };
        let ok: Write3ResOk = self.call::<_, _, FileWcc>(NfsProc3::WRITE, &args).await?;
        if ok.count as usize > sent {
            return Err(Error::Protocol(ProtocolViolation::WriteCount));
        }
        Ok(ok)
    }

    /// §3.3.8 CREATE of a regular file `name` in `dir`.
    pub async fn create(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        how: CreateHow3,
    ) -> Result<Create3ResOk> {
        let args = Create3Args {
            dir_op: dirop(dir, name.as_ref()),
            how,
        };
        self.call::<_, _, DirWcc>(NfsProc3::CREATE, &args).await
    }

    /// §3.3.9 MKDIR.
    pub async fn mkdir(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        attributes: &Sattr3,
    ) -> Result<Create3ResOk> {
        let args = MkDir3Args {
            dir_op: dirop(dir, name.as_ref()),
            attributes: attributes.clone(),
        };
        self.call::<_, _, DirWcc>(NfsProc3::MKDIR, &args).await
    }

    /// §3.3.10 SYMLINK `name` in `dir` pointing at `target` (sent DDP-eligible,
    /// RFC 8267 §4.1).
    pub async fn symlink(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        target: impl AsRef<[u8]>,
        attributes: &Sattr3,
    ) -> Result<Create3ResOk> {
        let args = Symlink3Args {
            dir_op: dirop(dir, name.as_ref()),
            symlink: SymlinkData3 {
                symlink_attributes: attributes.clone(),
                // COPY: the target path (metadata), once.
                symlink_data: NfsPath3(Bytes::copy_from_slice(target.as_ref())),
            },
        };
        self.call::<_, _, DirWcc>(NfsProc3::SYMLINK, &args).await
    }

    /// §3.3.11 MKNOD (a device, socket or FIFO).
    pub async fn mknod(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        what: MknodData3,
    ) -> Result<Create3ResOk> {
        let args = Mknod3Args {
            dir_op: dirop(dir, name.as_ref()),
            what,
        };
        self.call::<_, _, DirWcc>(NfsProc3::MKNOD, &args).await
    }

    /// §3.3.12 REMOVE of a non-directory.
    pub async fn remove(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<WccData> {
        let args = Remove3Args {
            object: dirop(dir, name.as_ref()),
        };
        let ok: DirWcc = self.call::<_, _, DirWcc>(NfsProc3::REMOVE, &args).await?;
        Ok(ok.dir_wcc)
    }

    /// §3.3.13 RMDIR of an empty directory.
    pub async fn rmdir(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<WccData> {
        let args = Remove3Args {
            object: dirop(dir, name.as_ref()),
        };
        let ok: DirWcc = self.call::<_, _, DirWcc>(NfsProc3::RMDIR, &args).await?;
        Ok(ok.dir_wcc)
    }

    /// §3.3.14 RENAME.
    pub async fn rename(
        &self,
        from_dir: &NfsFh3,
        from_name: impl AsRef<[u8]>,
        to_dir: &NfsFh3,
        to_name: impl AsRef<[u8]>,
    ) -> Result<Rename3Wcc> {
        let args = Rename3Args {
            from: dirop(from_dir, from_name.as_ref()),
            to: dirop(to_dir, to_name.as_ref()),
        };
        self.call::<_, _, Rename3Wcc>(NfsProc3::RENAME, &args).await
    }

    /// §3.3.15 LINK: a new name `name` in `dir` for `file`.
    pub async fn link(
        &self,
        file: &NfsFh3,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
    ) -> Result<Link3Wcc> {
        let args = Link3Args {
            file: file.clone(),
            link: dirop(dir, name.as_ref()),
        };
        self.call::<_, _, Link3Wcc>(NfsProc3::LINK, &args).await
    }

    /// §3.3.16 READDIR: one batch of entries after `cookie` (0 and a zero verifier
    /// for the start). See [`crate::readdir`] for iteration.
    pub async fn readdir(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: CookieVerf3,
        count: u32,
    ) -> Result<ReadDir3ResOk> {
        let args = ReadDir3Args {
            dir: dir.clone(),
            cookie,
            cookieverf,
            count,
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::READDIR, &args)
            .await
    }

    /// §3.3.17 READDIRPLUS: entries with attributes and handles.
    pub async fn readdirplus(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: CookieVerf3,
        dircount: u32,
        maxcount: u32,
    ) -> Result<ReadDirPlus3ResOk> {
        let args = ReadDirPlus3Args {
            dir: dir.clone(),
            cookie,
            cookieverf,
            dircount,
            maxcount,
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::READDIRPLUS, &args)
            .await
    }

    /// §3.3.18 FSSTAT.
    pub async fn fsstat(&self, fsroot: &NfsFh3) -> Result<FsStat3ResOk> {
        let args = FsRootArgs {
            fsroot: fsroot.clone(),
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::FSSTAT, &args)
            .await
    }

    /// §3.3.19 FSINFO.
    pub async fn fsinfo(&self, fsroot: &NfsFh3) -> Result<FsInfo3ResOk> {
        let args = FsRootArgs {
            fsroot: fsroot.clone(),
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::FSINFO, &args)
            .await
    }

    /// §3.3.20 PATHCONF.
    pub async fn pathconf(&self, object: &NfsFh3) -> Result<PathConf3ResOk> {
        let args = FsRootArgs {
            fsroot: object.clone(),
        };
        self.call::<_, _, ObjAttrFail>(NfsProc3::PATHCONF, &args)
            .await
    }

    /// §3.3.21 COMMIT of `count` bytes at `offset` (`count` 0: to the end of the
    /// file). The returned verifier is compared with the WRITEs' by [`crate::io`].
    pub async fn commit(&self, file: &NfsFh3, offset: u64, count: u32) -> Result<Commit3ResOk> {
        let args = Commit3Args {
            file: file.clone(),
            offset,
            count,
        };
        self.call::<_, _, FileWcc>(NfsProc3::COMMIT, &args).await
    }
}

/// "NFS GETATTR" and so on, for errors.
fn what(proc: NfsProc3) -> &'static str {
    const WHAT: [&str; 22] = [
        "NFS NULL",
        "NFS GETATTR",
        "NFS SETATTR",
        "NFS LOOKUP",
        "NFS ACCESS",
        "NFS READLINK",
        "NFS READ",
        "NFS WRITE",
        "NFS CREATE",
        "NFS MKDIR",
        "NFS SYMLINK",
        "NFS MKNOD",
        "NFS REMOVE",
        "NFS RMDIR",
        "NFS RENAME",
        "NFS LINK",
        "NFS READDIR",
        "NFS READDIRPLUS",
        "NFS FSSTAT",
        "NFS FSINFO",
        "NFS PATHCONF",
        "NFS COMMIT",
    ];
    WHAT.get(proc.0 as usize)
        .copied()
        .unwrap_or("NFS (unknown)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_names_match_the_rfc_procedure_names() {
        for n in 0..22 {
            let p = NfsProc3(n);
            assert_eq!(what(p), format!("NFS {}", p.name().unwrap()));
        }
        assert_eq!(what(NfsProc3(22)), "NFS (unknown)");
    }
}

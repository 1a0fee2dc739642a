//! Data procedures: RFC 1813 §3.3.6 READ, §3.3.7 WRITE, §3.3.21 COMMIT.
//!
//! Copies per byte (see the crate documentation): READ data over TCP is left in the
//! file for the TCP writer to `sendfile` (no copy by the server); over RDMA it is read
//! by `pread` straight into the buffer that becomes the reply's DDP-eligible item;
//! WRITE data is written by `pwrite` straight from the slice of the received call
//! buffer.

use nfs3::attr::ObjAttrFail;
use nfs3::io::*;
use nfs3::{DdpData, NfsResult, NfsStat3, StableHow, WccData};
use oncrpc::tcp::CallData;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{FileType, OFlags};
use xdr::{Bytes, Encode, FileRange, XdrStream};

use crate::errno::OrStat;
use crate::nfs::{post_op, wcc, Cx, MAX_IO};
use crate::vfs::{Meta, Node};

/// RFC 1813 §3.3.6: READ of a directory is NFS3ERR_ISDIR; of another non-regular
/// file, NFS3ERR_INVAL.
pub(crate) fn regular(node: &Node) -> Result<(), NfsStat3> {
    match node.meta.file_type() {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(NfsStat3::NFS3ERR_ISDIR),
        _ => Err(NfsStat3::NFS3ERR_INVAL),
    }
}

/// Opens the file for I/O as the caller. If the kernel refuses and the caller owns
/// the file, opens it as the server: knfsd's "owner override"
/// (`NFSD_MAY_OWNER_OVERRIDE`), which lets a client write a file it just created
/// read-only (`open(O_CREAT|O_WRONLY, 0444)` then WRITE, as `cp -p` and `tar` do),
/// since the permission check was the client's, at open time.
pub(crate) fn open_io(cx: &Cx<'_>, node: &Node, flags: OFlags) -> Result<OwnedFd, NfsStat3> {
    open_io_stat(cx, node, flags).map(|(fd, _)| fd)
}

/// [`open_io`], with the opened file's attributes (read anyway, to check the inode).
pub(crate) fn open_io_stat(
    cx: &Cx<'_>,
    node: &Node,
    flags: OFlags,
) -> Result<(OwnedFd, Meta), NfsStat3> {
    match cx.as_caller(|| node.reopen_stat(flags)) {
        Err(NfsStat3::NFS3ERR_ACCES) if cx.id.uid == node.meta.uid => node.reopen_stat(flags),
        other => other,
    }
}

/// §3.3.6 READ. At most [`MAX_IO`] bytes ("rtmax"); a larger count is shortened, as
/// §3.3.6 allows ("count ... may be less than requested").
///
/// How the data travels depends on the transport the call came over:
/// - **TCP** ([`Cx::byte_stream`]): the data is not read here. The file's size is
///   taken from the opened file (`statx`), which fixes `count` (what lies between
///   `offset` and the end of the file, at most the count asked), `eof` (`offset +
///   count` reaches the size) and the post-op attributes (the `statx` that checks the
///   reopened file is still the handle's inode); the reply carries the open
///   file and that range ([`nfs3::io::read_ok_from_file`]), and `oncrpc`'s TCP
///   writer sends it from the page cache by `sendfile` behind the header: no copy in
///   user space, none by the server at all (`oncrpc::tcp` says what happens if the
///   file shrinks first, or cannot be sent that way).
/// - **RPC-over-RDMA** and in-process calls: the data is read (`pread`) into a pooled
///   buffer, the reply's DDP-eligible item, which the RDMA transport sends by RDMA
///   Write (or inline) from there: one copy, by the kernel.
pub(crate) fn read(cx: &Cx<'_>, a: Read3Args) -> XdrStream {
    let (ex, node) = match cx.resolve(&a.file) {
        Ok(r) => r,
        Err(s) => {
            let fail: Read3Res = NfsResult::Fail(
                s,
                ObjAttrFail {
                    obj_attributes: None,
                },
            );
            return fail.to_xdr();
        }
    };
    let count = a.count.min(MAX_IO) as usize;
    let got = regular(&node).and_then(|()| {
        let (fd, meta) = open_io_stat(cx, &node, OFlags::RDONLY)?;
        if count > 0 && cx.byte_stream() {
            let len = meta.size.saturating_sub(a.offset).min(count as u64) as usize;
            let eof = a.offset.saturating_add(len as u64) >= meta.size;
            return Ok(Data::File { fd, meta, len, eof });
        }
        if count == 0 {
            return Ok(Data::Memory(Bytes::new()));
        }
        pread_pooled(cx, &fd, a.offset, count).map(Data::Memory)
    });
    let res: Read3Res = match got {
        Ok(Data::File { fd, meta, len, eof }) if len > 0 => {
            let range = FileRange {
                file: Arc::new(std::fs::File::from(fd)),
                offset: a.offset,
                len,
            };
            return nfs3::io::read_ok_from_file(&Some(meta.fattr(ex.id)), eof, range);
        }
        Ok(Data::File { meta, eof, .. }) => NfsResult::Ok(Read3ResOk {
            file_attributes: Some(meta.fattr(ex.id)),
            count: 0,
            eof,
            data: DdpData(Bytes::new()),
        }),
        Ok(Data::Memory(buf)) => {
            let attrs = node.stat().ok();
            let eof = attrs.map_or(true, |m| {
                a.offset.saturating_add(buf.len() as u64) >= m.size
            });
            NfsResult::Ok(Read3ResOk {
                file_attributes: attrs.map(|m| m.fattr(ex.id)),
                count: buf.len() as u32,
                eof,
                // Frozen from the pooled buffer: no copy.
                data: DdpData(buf),
            })
        }
        Err(s) => NfsResult::Fail(
            s,
            ObjAttrFail {
                obj_attributes: post_op(ex, &node),
            },
        ),
    };
    res.to_xdr()
}

/// Reads up to `count` (> 0) bytes at `offset` of `fd` into a buffer from the
/// server's pool, which becomes the reply's DDP-eligible item: the one copy on the
/// server, by the kernel. Its stale bytes beyond what was read are never handed out.
/// Issue 16: charged to the server's memory budget for as long as the buffer (or
/// the reply's bytes frozen from it) lives; ahead of WRITEs waiting for memory,
/// since answering releases memory soon. Past the budget: JUKEBOX, the client
/// retries later. Shorter than `count` only at the end of the file.
pub(crate) fn pread_pooled(
    cx: &Cx<'_>,
    fd: &OwnedFd,
    offset: u64,
    count: usize,
) -> Result<Bytes, NfsStat3> {
    let Some(charge) = cx.s.memory.charge_ahead(count as u64) else {
        cx.s.memory_refusals.refused(count as u64, &cx.s.memory);
        return Err(NfsStat3::NFS3ERR_JUKEBOX);
    };
    let buf = cx.s.read_buffers.get(count);
    buf.hold(Box::new(charge));
    let mut filled = 0;
    while filled < count {
        let at = offset.saturating_add(filled as u64);
        let n = buf
            .with_mut(filled..count, |free| rustix::io::pread(fd, free, at))
            .map_err(|_| NfsStat3::NFS3ERR_SERVERFAULT)?
            .or_stat()?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.freeze(0..filled)
        .map_err(|_| NfsStat3::NFS3ERR_SERVERFAULT)
}

/// READ data as [`read`] got it.
enum Data {
    /// Read into memory.
    Memory(Bytes),
    /// Left in the open file: `len` bytes at the call's offset, for a byte-stream
    /// transport to send; `meta` is the file's status when `len` and `eof` were fixed.
    File {
        fd: OwnedFd,
        meta: Meta,
        len: usize,
        eof: bool,
    },
}

/// §3.3.7 WRITE. `stable` is honoured: FILE_SYNC fsyncs, DATA_SYNC fdatasyncs,
/// UNSTABLE leaves the data to a later COMMIT; `committed` says which was done.
/// `apart`: the data, when the transport received it apart from the call (the
/// call's `data` is then empty: [`oncrpc::Request::data`]).
pub(crate) fn write(cx: &Cx<'_>, a: Write3Args, apart: Option<CallData>) -> Write3Res {
    let fail = |s, file_wcc| NfsResult::Fail(s, FileWcc { file_wcc });
    let (ex, node) = match cx.resolve(&a.file) {
        Ok(r) => r,
        Err(s) => return fail(s, WccData::default()),
    };
    let before = node.meta;
    if cx.read_only {
        return fail(NfsStat3::NFS3ERR_ROFS, wcc(ex, Some(&before), &node));
    }
    let apart = apart.filter(|_| a.data.0.is_empty());
    let len = apart.as_ref().map_or(a.data.0.len(), |d| d.len());
    // §3.3.7: count is "the number of bytes of data to be written"; data holds them.
    let count = a.count as usize;
    if count > len || a.stable.0 > StableHow::FILE_SYNC.0 {
        return fail(NfsStat3::NFS3ERR_INVAL, wcc(ex, Some(&before), &node));
    }
    let done = regular(&node).and_then(|()| {
        let fd = open_io(cx, &node, OFlags::WRONLY)?;
        match apart {
            // Spliced from the pipe: the one copy of the data on this path.
            Some(data) if count == len => data.write_to(fd.as_fd(), a.offset).or_stat()?,
            Some(data) => write_all_at(&fd, &data.into_vec().or_stat()?[..count], a.offset)?,
            None => write_all_at(&fd, &a.data.0[..count], a.offset)?,
        }
        match a.stable {
            StableHow::FILE_SYNC => rustix::fs::fsync(&fd).or_stat()?,
            StableHow::DATA_SYNC => rustix::fs::fdatasync(&fd).or_stat()?,
            _ => {}
        }
        Ok(())
    });
    let file_wcc = wcc(ex, Some(&before), &node);
    match done {
        Ok(()) => NfsResult::Ok(Write3ResOk {
            file_wcc,
            count: count as u32,
            committed: a.stable,
            verf: cx.s.verifier,
        }),
        Err(s) => fail(s, file_wcc),
    }
}

/// Writes all of `data` to `fd` at `offset` (`pwrite`: one copy into the page cache).
fn write_all_at(fd: &OwnedFd, data: &[u8], offset: u64) -> Result<(), NfsStat3> {
    let mut off = 0;
    while off < data.len() {
        let n =
            rustix::io::pwrite(fd, &data[off..], offset.saturating_add(off as u64)).or_stat()?;
        if n == 0 {
            return Err(NfsStat3::NFS3ERR_IO);
        }
        off += n;
    }
    Ok(())
}

/// §3.3.21 COMMIT: flushes the whole file (a range commit may flush more than asked,
/// which §3.3.21 allows). Runs as the server: COMMIT only makes durable what WRITE,
/// which was checked, already put there.
pub(crate) fn commit(cx: &Cx<'_>, a: Commit3Args) -> Commit3Res {
    let fail = |s, file_wcc| NfsResult::Fail(s, FileWcc { file_wcc });
    let (ex, node) = match cx.resolve(&a.file) {
        Ok(r) => r,
        Err(s) => return fail(s, WccData::default()),
    };
    let before = node.meta;
    let done = regular(&node).and_then(|()| {
        let fd = node.reopen(OFlags::RDONLY)?;
        rustix::fs::fsync(&fd).or_stat()
    });
    let file_wcc = wcc(ex, Some(&before), &node);
    match done {
        Ok(()) => NfsResult::Ok(Commit3ResOk {
            file_wcc,
            verf: cx.s.verifier,
        }),
        Err(s) => fail(s, file_wcc),
    }
}

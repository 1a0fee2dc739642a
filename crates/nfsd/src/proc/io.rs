//! Data procedures: RFC 1813 §3.3.6 READ, §3.3.7 WRITE, §3.3.21 COMMIT.
//!
//! Copies per byte (see the crate documentation): READ data is read by `pread`
//! straight into the buffer that becomes the reply's DDP-eligible item; WRITE data is
//! written by `pwrite` straight from the slice of the received call buffer.

use nfs3::attr::ObjAttrFail;
use nfs3::io::*;
use nfs3::{DdpData, NfsResult, NfsStat3, StableHow, WccData};
use std::os::fd::OwnedFd;

use rustix::fs::{FileType, OFlags};
use xdr::Bytes;

use crate::errno::OrStat;
use crate::nfs::{post_op, wcc, Cx, MAX_IO};
use crate::vfs::Node;

/// RFC 1813 §3.3.6: READ of a directory is NFS3ERR_ISDIR; of another non-regular
/// file, NFS3ERR_INVAL.
fn regular(node: &Node) -> Result<(), NfsStat3> {
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
    match cx.as_caller(|| node.reopen(flags)) {
        Err(NfsStat3::NFS3ERR_ACCES) if cx.id.uid == node.meta.uid => node.reopen(flags),
        other => other,
    }
}

/// §3.3.6 READ. At most [`MAX_IO`] bytes ("rtmax"); a larger count is shortened, as
/// §3.3.6 allows ("count ... may be less than requested").
pub(crate) fn read(cx: &Cx<'_>, a: Read3Args) -> Read3Res {
    let (ex, node) = match cx.resolve(&a.file) {
        Ok(r) => r,
        Err(s) => {
            return NfsResult::Fail(
                s,
                ObjAttrFail {
                    obj_attributes: None,
                },
            )
        }
    };
    let count = a.count.min(MAX_IO) as usize;
    let got = regular(&node).and_then(|()| {
        let fd = open_io(cx, &node, OFlags::RDONLY)?;
        if count == 0 {
            return Ok(Bytes::new());
        }
        // The reply buffer, from the server's pool: the kernel copies file data into
        // it (the one copy on the server), and it is handed to the encoder as the
        // DDP-eligible item. Its stale bytes beyond what was read are never handed out.
        // Issue 16: charged to the server's memory budget for as long as the buffer
        // (or the reply's bytes frozen from it) lives; ahead of WRITEs waiting for
        // memory, since answering releases memory soon. Past the budget: JUKEBOX,
        // the client retries later.
        let Some(charge) = cx.s.memory.charge_ahead(count as u64) else {
            cx.s.memory_refusals.refused(count as u64, &cx.s.memory);
            return Err(NfsStat3::NFS3ERR_JUKEBOX);
        };
        let buf = cx.s.read_buffers.get(count);
        buf.hold(Box::new(charge));
        let mut filled = 0;
        while filled < count {
            let at = a.offset.saturating_add(filled as u64);
            let n = buf
                .with_mut(filled..count, |free| rustix::io::pread(&fd, free, at))
                .map_err(|_| NfsStat3::NFS3ERR_SERVERFAULT)?
                .or_stat()?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buf.freeze(0..filled)
            .map_err(|_| NfsStat3::NFS3ERR_SERVERFAULT)
    });
    match got {
        Ok(buf) => {
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
    }
}

/// §3.3.7 WRITE. `stable` is honoured: FILE_SYNC fsyncs, DATA_SYNC fdatasyncs,
/// UNSTABLE leaves the data to a later COMMIT; `committed` says which was done.
pub(crate) fn write(cx: &Cx<'_>, a: Write3Args) -> Write3Res {
    let fail = |s, file_wcc| NfsResult::Fail(s, FileWcc { file_wcc });
    let (ex, node) = match cx.resolve(&a.file) {
        Ok(r) => r,
        Err(s) => return fail(s, WccData::default()),
    };
    let before = node.meta;
    if cx.read_only {
        return fail(NfsStat3::NFS3ERR_ROFS, wcc(ex, Some(&before), &node));
    }
    // §3.3.7: count is "the number of bytes of data to be written"; data holds them.
    let Some(data) = a.data.0.get(..a.count as usize) else {
        return fail(NfsStat3::NFS3ERR_INVAL, wcc(ex, Some(&before), &node));
    };
    if a.stable.0 > StableHow::FILE_SYNC.0 {
        return fail(NfsStat3::NFS3ERR_INVAL, wcc(ex, Some(&before), &node));
    }
    let done = regular(&node).and_then(|()| {
        let fd = open_io(cx, &node, OFlags::WRONLY)?;
        let mut off = 0;
        while off < data.len() {
            let at = a.offset.saturating_add(off as u64);
            let n = rustix::io::pwrite(&fd, &data[off..], at).or_stat()?;
            if n == 0 {
                return Err(NfsStat3::NFS3ERR_IO);
            }
            off += n;
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
            count: data.len() as u32,
            committed: a.stable,
            verf: cx.s.verifier,
        }),
        Err(s) => fail(s, file_wcc),
    }
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

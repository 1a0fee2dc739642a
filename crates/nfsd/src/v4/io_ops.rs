//! Data operations (RFC 8881 §18.22 READ, §18.32 WRITE, §18.3 COMMIT) through
//! NFSv3's file layer ([`crate::proc::io`]): the same opening as the caller (with
//! the owner override), the same pooled, budget-charged READ buffers, the same
//! `stable_how` handling and write verifier (which changes on restart, so a client
//! resends what it wrote UNSTABLE).
//!
//! The stateid (an open, lock or special one) is checked first
//! ([`super::state::StateTable::check_io`]).
//!
//! Copies per byte, as for NFSv3: WRITE data is written by `pwrite` from the
//! received buffer. READ data over RPC-over-RDMA is read by `pread` into a pooled
//! buffer, the reply's DDP-eligible item (RFC 8267 §5.1), sent by RDMA Write from
//! there; over TCP it is left in the file and `sendfile`d from the page cache
//! ([`super::read_file`]): no copy by the server.

use nfs3::io::{Commit3Args, Write3Args};
use nfs3::{NfsResult, NfsStat3, StableHow};
use nfs4::io::*;
use nfs4::{DdpData, NfsStat4, Res4};
use rustix::fs::{FileType, OFlags};
use xdr::Bytes;

use super::compound::Compound;
use super::errors::stat4;
use super::open_ops::state_file;
use super::state::opens::Io;
use crate::nfs::MAX_IO;

/// The statuses of §18.22.3 / §18.32.3 for a current filehandle that is not a
/// regular file, from NFSv3's (ISDIR for a directory, INVAL otherwise).
fn not_regular(cx: &Compound<'_>, s: NfsStat3) -> NfsStat4 {
    if s != NfsStat3::NFS3ERR_INVAL {
        return stat4(s);
    }
    match cx.current() {
        Ok(super::pseudo::Fh::Export(fh)) => match cx.table.resolve(fh, cx.caller) {
            Ok((_, n)) if n.meta.file_type() == FileType::Symlink => NfsStat4::NFS4ERR_SYMLINK,
            Ok((_, n)) if n.meta.file_type() != FileType::RegularFile => {
                NfsStat4::NFS4ERR_WRONG_TYPE
            }
            _ => stat4(s),
        },
        _ => stat4(s),
    }
}

/// The current filehandle as a file for I/O with the stateid `given`: a pseudo
/// directory is NFS4ERR_ISDIR.
fn io_file(cx: &Compound<'_>, given: &nfs4::StateId4, io: Io) -> Result<nfs3::NfsFh3, NfsStat4> {
    if matches!(cx.current()?, super::pseudo::Fh::Pseudo(_)) {
        return Err(NfsStat4::NFS4ERR_ISDIR);
    }
    let client = cx.client()?;
    let id = cx.stateid(given)?;
    let (fh, file) = state_file(cx)?;
    cx.server.state().check_io(client, &id, &file, io)?;
    Ok(fh)
}

/// §18.22 READ: at most [`MAX_IO`] bytes (a larger count is shortened, §18.22.3);
/// `eof` when the read reached the end of the file.
pub(crate) fn read(cx: &mut Compound<'_>, a: &Read4Args) -> Read4Res {
    let mut run = || -> Result<Read4ResOk, NfsStat4> {
        let fh = io_file(cx, &a.stateid, Io::Read)?;
        let cx3 = cx.cx3(&fh);
        let (_, node) = cx3.resolve(&fh).map_err(stat4)?;
        crate::proc::io::regular(&node).map_err(|s| not_regular(cx, s))?;
        let (fd, meta) =
            crate::proc::io::open_io_stat(&cx3, &node, OFlags::RDONLY).map_err(stat4)?;
        let count = a.count.min(MAX_IO) as usize;
        if count > 0 && cx3.byte_stream() {
            // Over TCP: left in the file (module read_file); what lies between the
            // offset and the end of the file, at most `count`.
            let len = meta.size.saturating_sub(a.offset).min(count as u64) as usize;
            let eof = a.offset.saturating_add(len as u64) >= meta.size;
            if len > 0 {
                cx.file_reads.push(xdr::FileRange {
                    file: std::sync::Arc::new(std::fs::File::from(fd)),
                    offset: a.offset,
                    len,
                });
            }
            return Ok(Read4ResOk {
                eof,
                data: DdpData(super::read_file::stand_in(len)),
            });
        }
        let data = if count == 0 {
            Bytes::new()
        } else {
            crate::proc::io::pread_pooled(&cx3, &fd, a.offset, count).map_err(stat4)?
        };
        let size = rustix::fs::fstat(&fd).map_or(0, |st| st.st_size as u64);
        Ok(Read4ResOk {
            eof: a.offset.saturating_add(data.len() as u64) >= size,
            data: DdpData(data),
        })
    };
    run().map_or_else(Res4::Err, Res4::Ok)
}

/// §18.32 WRITE, NFSv3's: `stable` honoured (FILE_SYNC fsyncs, DATA_SYNC
/// fdatasyncs, UNSTABLE waits for COMMIT).
pub(crate) fn write(cx: &mut Compound<'_>, a: &Write4Args) -> Write4Res {
    // Data received apart leaves the operation's own empty (`Request::data`). It is
    // the first WRITE's (`nfs4::ulb::call_data_item`), this one's if its own is
    // empty: taken now, so that no later WRITE takes it if this one fails.
    let apart = match a.data.0.is_empty() {
        true => cx.caller.data.take(),
        false => None,
    };
    let run = || -> Result<Write4ResOk, NfsStat4> {
        let fh = io_file(cx, &a.stateid, Io::Write)?;
        let cx3 = cx.cx3(&fh);
        let count = apart.as_ref().map_or(a.data.0.len(), |d| d.len());
        let args = Write3Args {
            file: fh.clone(),
            offset: a.offset,
            count: count as u32,
            stable: StableHow(a.stable.0),
            data: nfs3::DdpData(a.data.0.clone()),
        };
        match crate::proc::io::write(&cx3, args, apart) {
            NfsResult::Ok(ok) => Ok(Write4ResOk {
                count: ok.count,
                committed: StableHow4(ok.committed.0),
                writeverf: ok.verf,
            }),
            NfsResult::Fail(s, _) => Err(not_regular(cx, s)),
        }
    };
    run().map_or_else(Res4::Err, Res4::Ok)
}

/// §18.3 COMMIT, NFSv3's (the whole file is flushed); a pseudo directory is
/// NFS4ERR_ISDIR.
pub(crate) fn commit(cx: &mut Compound<'_>, a: &Commit4Args) -> Commit4Res {
    let run = || -> Result<Commit4ResOk, NfsStat4> {
        let fh = match cx.current()? {
            super::pseudo::Fh::Pseudo(_) => return Err(NfsStat4::NFS4ERR_ISDIR),
            super::pseudo::Fh::Export(fh) => fh.clone(),
        };
        let args = Commit3Args {
            file: fh.clone(),
            offset: a.offset,
            count: a.count,
        };
        match crate::proc::io::commit(&cx.cx3(&fh), args) {
            NfsResult::Ok(ok) => Ok(Commit4ResOk { writeverf: ok.verf }),
            NfsResult::Fail(s, _) => Err(not_regular(cx, s)),
        }
    };
    run().map_or_else(Res4::Err, Res4::Ok)
}

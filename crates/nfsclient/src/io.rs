//! Pipelined file I/O: several READs or WRITEs in flight on one connection, sized by
//! FSINFO's `rtmax`/`wtmax` (RFC 1813 §3.3.19), and UNSTABLE writes made durable by
//! COMMIT with a write-verifier check (§3.3.7, §3.3.21).
//!
//! Each request runs as its own small task (one RPC), so up to `depth` calls are on
//! the wire at once; results are consumed in file order.
//!
//! # Copies per byte
//!
//! **Read** ([`FileReader`]), over TCP:
//! 1. kernel socket buffer -> the RPC receive buffer (the `read` syscall);
//!    unavoidable on TCP. The READ3resok `data` handed to the caller is a slice of
//!    that buffer: the XDR decoder and this module copy nothing.
//! 2. (+1 when the server splits the reply into several record fragments: the
//!    `oncrpc` record layer joins them. Our `nfsd` does with its default 1 MiB
//!    fragment size and 1 MiB READs; knfsd sends one fragment.)
//!
//! What the caller does next is its business: `nfs get` writes the slice to a local
//! file (one more copy, into the page cache); the bench can drop it.
//!
//! **Write** ([`FileWriter`]), over TCP: the caller's `Bytes` are sliced into
//! `wsize` pieces (no copy), each sent as a DDP-eligible WRITE3args `data` item and
//! gathered into a vectored socket write: one copy, user buffer -> kernel. Pieces
//! written UNSTABLE are kept (by reference count, not copied) until a COMMIT
//! returns their WRITE's verifier, so they can be re-sent.
//!
//! **Over RPC-over-RDMA** the same code runs unchanged; the copies are the
//! transport's (`rpcrdma-transport` and the provider document theirs). Today, with
//! the userspace iWARP provider, on the client:
//! - READ: the provider places the RDMA Write payload into our registered Write
//!   chunk (the socket read, 1), then `rpcrdma-transport` joins the reduced reply and
//!   the chunk into one contiguous reply for `oncrpc` (+1, its `complete`): 2.
//! - WRITE: `rpcrdma-transport` copies the data into a registered region for the
//!   server's RDMA Read (1), which the provider then sends (the socket write, +1): 2.
//!
//! So RDMA over the software provider costs one copy per byte more than TCP each way;
//! a reply receiver that keeps the chunk as its own `Bytes`, and registering the
//! caller's buffer in place, would bring both back to TCP's count.

use std::collections::VecDeque;

use nfs3::io::{Read3ResOk, Write3ResOk};
use nfs3::{NfsFh3, StableHow, WriteVerf3};
use oncrpc::ClientError;
use tokio::task::{JoinError, JoinHandle};
use xdr::Bytes;

use crate::error::{Error, ProtocolViolation, Result};
use crate::nfs::NfsClient;

/// COMMITs tried before [`Error::VerifierUnstable`]: each attempt re-sends the data
/// whose WRITE verifier the COMMIT did not return.
pub const MAX_COMMIT_ATTEMPTS: u32 = 4;

/// Sizes and depths of pipelined I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoOptions {
    /// Bytes per READ (at most FSINFO `rtmax`).
    pub rsize: u32,
    /// Bytes per WRITE (at most FSINFO `wtmax`).
    pub wsize: u32,
    /// READs or WRITEs in flight at once.
    pub depth: usize,
    /// Bytes written UNSTABLE after which [`FileWriter`] COMMITs on its own, bounding
    /// the memory held for re-sending.
    pub commit_every: u64,
}

impl Default for IoOptions {
    fn default() -> Self {
        IoOptions {
            rsize: 1024 * 1024,
            wsize: 1024 * 1024,
            depth: 8,
            commit_every: 64 * 1024 * 1024,
        }
    }
}

/// Waits for one call task. A cancelled task (the runtime is shutting down) is
/// reported like a vanished RPC driver; a panic is resumed.
async fn join<T>(task: JoinHandle<Result<T>>, what: &'static str) -> Result<T> {
    task.await.unwrap_or_else(|e: JoinError| {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        Err(Error::Rpc {
            what,
            source: ClientError::DriverGone,
        })
    })
}

struct PendingRead {
    offset: u64,
    count: u32,
    task: JoinHandle<Result<Read3ResOk>>,
}

/// Reads a file in order with up to `depth` READs in flight.
///
/// Call [`FileReader::next_chunk`] until it returns `None`. Dropping the reader
/// abandons the READs in flight.
pub struct FileReader {
    nfs: NfsClient,
    fh: NfsFh3,
    rsize: u32,
    depth: usize,
    /// Offset of the next READ to issue.
    next: u64,
    /// No READ is issued at or past this offset.
    end: u64,
    /// The server said EOF: issue nothing more.
    eof: bool,
    inflight: VecDeque<PendingRead>,
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("next", &self.next)
            .field("end", &self.end)
            .field("eof", &self.eof)
            .field("inflight", &self.inflight.len())
            .finish()
    }
}

impl FileReader {
    /// A reader of `fh` from `offset`, for `len` bytes or (with `None`) up to EOF.
    /// `rsize` 0 is taken as 1, `depth` 0 as 1.
    pub fn new(
        nfs: NfsClient,
        fh: NfsFh3,
        offset: u64,
        len: Option<u64>,
        opts: &IoOptions,
    ) -> Self {
        FileReader {
            nfs,
            fh,
            rsize: opts.rsize.max(1),
            depth: opts.depth.max(1),
            next: offset,
            end: len.map_or(u64::MAX, |l| offset.saturating_add(l)),
            eof: false,
            inflight: VecDeque::new(),
        }
    }

    fn spawn(&self, offset: u64, count: u32) -> PendingRead {
        let nfs = self.nfs.clone();
        let fh = self.fh.clone();
        PendingRead {
            offset,
            count,
            task: tokio::spawn(async move { nfs.read(&fh, offset, count).await }),
        }
    }

    fn fill(&mut self) {
        while !self.eof && self.inflight.len() < self.depth && self.next < self.end {
            let count = (self.end - self.next).min(u64::from(self.rsize)) as u32;
            let p = self.spawn(self.next, count);
            self.inflight.push_back(p);
            self.next += u64::from(count);
        }
    }

    /// Aborts the READs in flight and issues no more (after EOF or an error).
    fn abandon(&mut self) {
        self.eof = true;
        for p in self.inflight.drain(..) {
            p.task.abort();
        }
    }

    /// The next piece of the file in order: its offset and data (a slice of the
    /// reply buffer, not copied), or `None` at EOF or at the end of the range.
    ///
    /// After an error the reader is finished: later calls return `Ok(None)`.
    pub async fn next_chunk(&mut self) -> Result<Option<(u64, Bytes)>> {
        self.fill();
        let Some(p) = self.inflight.pop_front() else {
            return Ok(None);
        };
        let ok = match join(p.task, "NFS READ").await {
            Ok(ok) => ok,
            Err(e) => {
                self.abandon();
                return Err(e);
            }
        };
        let data = ok.data.0;
        let n = data.len() as u64;
        if ok.eof {
            // Nothing exists past this reply; READs issued beyond it are moot.
            self.abandon();
            if data.is_empty() {
                return Ok(None);
            }
        } else if n < u64::from(p.count) {
            if n == 0 {
                self.abandon();
                return Err(Error::Protocol(ProtocolViolation::EmptyRead));
            }
            // RFC 1813 §3.3.6: a READ may return fewer bytes than asked without being
            // at EOF. Ask for the rest first, so pieces still come out in order.
            let rest = self.spawn(p.offset + n, p.count - n as u32);
            self.inflight.push_front(rest);
        }
        Ok(Some((p.offset, data)))
    }
}

impl Drop for FileReader {
    fn drop(&mut self) {
        self.abandon();
    }
}

struct PendingWrite {
    offset: u64,
    data: Bytes,
    task: JoinHandle<Result<Write3ResOk>>,
}

/// One piece written UNSTABLE, kept until a COMMIT returns `verf`.
struct Uncommitted {
    offset: u64,
    data: Bytes,
    verf: WriteVerf3,
}

/// Writes a file with up to `depth` WRITEs in flight, UNSTABLE by default, and makes
/// the data durable with COMMIT.
///
/// Call [`FileWriter::write`] any number of times, then [`FileWriter::finish`]: data
/// is durable on the server only once `finish` (or [`FileWriter::commit`]) returns
/// `Ok`. Dropping a writer without finishing abandons WRITEs in flight. After an
/// error, the file's content on the server is unknown past the last successful
/// COMMIT: drop the writer and start again.
///
/// Every `commit_every` bytes written UNSTABLE the writer COMMITs on its own; that
/// drains the pipeline once (a bubble of one round trip per `commit_every` bytes),
/// the price of bounding the memory held for re-sending.
pub struct FileWriter {
    nfs: NfsClient,
    fh: NfsFh3,
    wsize: usize,
    depth: usize,
    stable: StableHow,
    commit_every: u64,
    inflight: VecDeque<PendingWrite>,
    uncommitted: Vec<Uncommitted>,
    uncommitted_bytes: u64,
    /// Bytes the server acknowledged (re-sends not counted twice).
    written: u64,
    /// WRITEs re-sent because of a verifier change (for tests and statistics).
    resent: u64,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("stable", &self.stable)
            .field("inflight", &self.inflight.len())
            .field("uncommitted_bytes", &self.uncommitted_bytes)
            .field("written", &self.written)
            .finish()
    }
}

impl FileWriter {
    /// A writer to `fh` asking for stability `stable` (UNSTABLE is the fast path;
    /// FILE_SYNC makes every WRITE durable and needs no COMMIT).
    pub fn new(nfs: NfsClient, fh: NfsFh3, stable: StableHow, opts: &IoOptions) -> Self {
        FileWriter {
            nfs,
            fh,
            wsize: opts.wsize.max(1) as usize,
            depth: opts.depth.max(1),
            stable,
            commit_every: opts.commit_every.max(1),
            inflight: VecDeque::new(),
            uncommitted: Vec::new(),
            uncommitted_bytes: 0,
            written: 0,
            resent: 0,
        }
    }

    /// Bytes the server has acknowledged so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// WRITEs re-sent after a COMMIT returned a different verifier.
    pub fn resent(&self) -> u64 {
        self.resent
    }

    fn spawn(&mut self, offset: u64, data: Bytes) {
        let nfs = self.nfs.clone();
        let fh = self.fh.clone();
        let stable = self.stable;
        let sent = data.clone(); // a reference, not a copy
        let task = tokio::spawn(async move { nfs.write(&fh, offset, sent, stable).await });
        self.inflight.push_back(PendingWrite { offset, data, task });
    }

    /// Queues `data` at `offset`, in `wsize` pieces (slices, not copies), waiting
    /// only while `depth` WRITEs are already in flight.
    pub async fn write(&mut self, offset: u64, data: Bytes) -> Result<()> {
        let mut off = offset;
        let mut rest = data;
        while !rest.is_empty() {
            while self.inflight.len() >= self.depth {
                self.complete_one().await?;
            }
            let piece = rest.split_to(rest.len().min(self.wsize));
            let len = piece.len() as u64;
            self.spawn(off, piece);
            off += len;
        }
        if self.uncommitted_bytes >= self.commit_every {
            self.commit().await?;
        }
        Ok(())
    }

    /// Waits for the oldest WRITE and files its result.
    async fn complete_one(&mut self) -> Result<()> {
        let Some(p) = self.inflight.pop_front() else {
            return Ok(());
        };
        let ok = match join(p.task, "NFS WRITE").await {
            Ok(ok) => ok,
            Err(e) => {
                self.abandon();
                return Err(e);
            }
        };
        let n = ok.count as usize;
        if n == 0 && !p.data.is_empty() {
            self.abandon();
            return Err(Error::Protocol(ProtocolViolation::EmptyWrite));
        }
        self.written += n as u64;
        let mut data = p.data;
        let rest = data.split_off(n);
        // RFC 1813 §3.3.7: `committed` says how stable the data now is. Anything short
        // of DATA_SYNC may be lost if the server restarts: keep it for COMMIT.
        if ok.committed == StableHow::UNSTABLE {
            self.uncommitted_bytes += n as u64;
            self.uncommitted.push(Uncommitted {
                offset: p.offset,
                data,
                verf: ok.verf,
            });
        }
        if !rest.is_empty() {
            // §3.3.7: the server may write fewer bytes than sent; send the rest.
            self.spawn(p.offset + n as u64, rest);
        }
        Ok(())
    }

    async fn drain(&mut self) -> Result<()> {
        while !self.inflight.is_empty() {
            self.complete_one().await?;
        }
        Ok(())
    }

    /// Aborts the WRITEs in flight (after an error). What the server acknowledged
    /// stays acknowledged; what it did not is unknown.
    fn abandon(&mut self) {
        for p in self.inflight.drain(..) {
            p.task.abort();
        }
    }

    /// Waits for every WRITE in flight, then COMMITs what was written UNSTABLE.
    ///
    /// RFC 1813 §3.3.21 (and §3.3.7 on `verf`): the verifier COMMIT returns must be
    /// the one each UNSTABLE WRITE returned; a piece whose WRITE verifier differs may
    /// have been lost (the server restarted in between) and is written again, then
    /// committed again. After [`MAX_COMMIT_ATTEMPTS`] COMMITs that each found changed
    /// data, [`Error::VerifierUnstable`].
    pub async fn commit(&mut self) -> Result<()> {
        self.drain().await?;
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            if self.uncommitted.is_empty() {
                return Ok(());
            }
            let (offset, count) = commit_range(&self.uncommitted);
            let ok = self.nfs.commit(&self.fh, offset, count).await?;
            let stale: Vec<Uncommitted> = std::mem::take(&mut self.uncommitted)
                .into_iter()
                .filter(|u| u.verf != ok.verf)
                .collect();
            self.uncommitted_bytes = 0;
            if stale.is_empty() {
                return Ok(());
            }
            tracing::info!(
                pieces = stale.len(),
                "write verifier changed: re-sending data the server may have lost"
            );
            for u in stale {
                let len = u.data.len() as u64;
                self.written -= len; // counted again when re-acknowledged
                self.resent += 1;
                while self.inflight.len() >= self.depth {
                    self.complete_one().await?;
                }
                self.spawn(u.offset, u.data);
            }
            self.drain().await?;
        }
        if self.uncommitted.is_empty() {
            Ok(())
        } else {
            Err(Error::VerifierUnstable {
                attempts: MAX_COMMIT_ATTEMPTS,
            })
        }
    }

    /// Commits everything and returns the bytes written.
    pub async fn finish(mut self) -> Result<u64> {
        self.commit().await?;
        Ok(self.written)
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// COMMIT3args `offset` and `count` covering every piece; `count` 0 ("to the end of
/// the file", §3.3.21) when the span does not fit in 32 bits.
fn commit_range(pieces: &[Uncommitted]) -> (u64, u32) {
    let start = pieces.iter().map(|u| u.offset).min().unwrap_or(0);
    let end = pieces
        .iter()
        .map(|u| u.offset + u.data.len() as u64)
        .max()
        .unwrap_or(0);
    (start, u32::try_from(end - start).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(offset: u64, len: usize) -> Uncommitted {
        Uncommitted {
            offset,
            data: Bytes::from(vec![0u8; len]),
            verf: [0; 8],
        }
    }

    #[test]
    fn commit_range_spans_all_pieces_in_any_order() {
        assert_eq!(commit_range(&[piece(100, 10), piece(0, 50)]), (0, 110));
        assert_eq!(commit_range(&[piece(7, 1)]), (7, 1));
    }

    #[test]
    fn commit_range_over_4_gib_means_to_end_of_file() {
        let far = piece(1 << 33, 1);
        assert_eq!(commit_range(&[piece(0, 1), far]), (0, 0));
    }
}

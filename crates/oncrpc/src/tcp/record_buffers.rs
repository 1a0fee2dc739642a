//! Reused memory for large records read over TCP.
//!
//! A 1 MiB WRITE call (server) or READ reply (client) was read into memory of its
//! own, allocated for that record and freed when it had been served. Blocks that
//! large are mappings of their own (glibc's mmap threshold, which nfsd fixes at
//! 256 KiB: `nfsd::malloc`), so every record cost an `mmap`, a `munmap` and a page
//! fault per 4 KiB page, each page zeroed by the kernel before the socket read filled
//! it: measured on the host, 123,064 page faults and 487 `mmap`s in nfsd for 512
//! 1 MiB WRITEs, and in the lab guest, where each fault is emulated, our WRITEs
//! over TCP cost 1.32x knfsd's CPU per byte.
//!
//! [`RecordBuffers`] keeps the buffers of records that have been served and hands
//! them to the next large record: a record's bytes are a [`Bytes`] whose owner gives
//! its buffer back when the last reference goes ([`Bytes::from_owner`]). What it
//! keeps is bounded (`max_idle_bytes`), and [`RecordBuffers::release_if_unused_for`],
//! run periodically, gives it all back after a quiet period, so a server's memory
//! still falls after a burst (issue 16).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Records at least this large are read into a reused buffer; smaller ones come from
/// the connection's read buffer (the allocator reuses blocks that small itself).
pub const MIN_REUSED_RECORD: usize = 128 * 1024;

/// Buffers are allocated in multiples of this, so that records of nearly one size
/// (a 1 MiB WRITE's call with headers of varying length) fit each other's buffers.
const GRANULE: usize = 64 * 1024;

/// Default bound on the idle buffers kept: sixteen 1 MiB records.
pub const DEFAULT_MAX_IDLE_BYTES: usize = 16 * 1024 * 1024 + 16 * GRANULE;

/// A pool of buffers for large records. Clones share the pool.
#[derive(Clone, Debug)]
pub struct RecordBuffers {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    idle: Mutex<Idle>,
    max_idle_bytes: usize,
}

#[derive(Debug, Default)]
struct Idle {
    buffers: Vec<Vec<u8>>,
    /// The sum of their capacities.
    bytes: usize,
    /// When a buffer was last taken.
    last_taken: Option<Instant>,
}

impl Default for RecordBuffers {
    fn default() -> Self {
        RecordBuffers::new(DEFAULT_MAX_IDLE_BYTES)
    }
}

impl RecordBuffers {
    /// A pool that keeps at most `max_idle_bytes` of buffers while they are not in
    /// use (0: none; every record gets memory of its own).
    pub fn new(max_idle_bytes: usize) -> Self {
        RecordBuffers {
            shared: Arc::new(Shared {
                idle: Mutex::new(Idle::default()),
                max_idle_bytes,
            }),
        }
    }

    /// An empty buffer of at least `len` bytes' capacity: an idle one if one is large
    /// enough, else a new one. The caller has bounded `len` (the record's announced
    /// length, checked against the maximum record size).
    pub(crate) fn take(&self, len: usize) -> RecordBuffer {
        let reused = {
            let mut idle = self.lock();
            idle.last_taken = Some(Instant::now());
            let fit = idle.buffers.iter().position(|b| b.capacity() >= len);
            fit.map(|i| {
                let b = idle.buffers.swap_remove(i);
                idle.bytes -= b.capacity();
                b
            })
        };
        let buf = reused.unwrap_or_else(|| Vec::with_capacity(len.next_multiple_of(GRANULE)));
        RecordBuffer {
            buf,
            home: Arc::downgrade(&self.shared),
        }
    }

    /// Bytes held by idle buffers.
    pub fn idle_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Frees the idle buffers if none was taken for `quiet`: run every few seconds,
    /// this keeps them through a stream of records and gives them back once the
    /// stream stops.
    pub fn release_if_unused_for(&self, quiet: Duration) {
        let mut idle = self.lock();
        if idle.last_taken.map_or(true, |t| t.elapsed() >= quiet) {
            idle.buffers = Vec::new();
            idle.bytes = 0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.shared.lock()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        // The lists stay consistent under a panic (each update is one push or one
        // remove with its byte count), so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        let mut idle = self.lock();
        if idle.bytes + buf.capacity() <= self.max_idle_bytes {
            buf.clear();
            idle.bytes += buf.capacity();
            idle.buffers.push(buf);
        }
    }
}

/// A buffer taken from [`RecordBuffers`]: filled by the reader, then frozen into the
/// record's [`Bytes`]; it goes back to its pool when the last of those is dropped.
#[derive(Debug)]
pub(crate) struct RecordBuffer {
    buf: Vec<u8>,
    home: Weak<Shared>,
}

impl RecordBuffer {
    /// The buffer, to fill (within its capacity: it is never grown).
    pub(crate) fn vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The record's bytes; the buffer returns to the pool when they are dropped.
    pub(crate) fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for RecordBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for RecordBuffer {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(pool: &RecordBuffers, len: usize, byte: u8) -> Bytes {
        let mut b = pool.take(len);
        b.vec_mut().resize(len, byte);
        b.freeze()
    }

    #[test]
    fn a_served_records_buffer_is_reused_by_the_next_one() {
        let pool = RecordBuffers::new(4 << 20);
        let first = filled(&pool, 1 << 20, 1);
        let at = first.as_ptr();
        assert_eq!(pool.idle_bytes(), 0);
        let view = first.slice(10..20);
        drop(first);
        // Still referenced by a slice: not back yet.
        assert_eq!(pool.idle_bytes(), 0);
        drop(view);
        assert_eq!(pool.idle_bytes(), (1 << 20) as usize);
        let second = filled(&pool, (1 << 20) - 100, 2);
        assert_eq!(second.as_ptr(), at, "the same memory");
        assert!(second.iter().all(|&b| b == 2));
        assert_eq!(pool.idle_bytes(), 0);
    }

    #[test]
    fn idle_buffers_are_bounded_and_too_small_ones_are_not_taken() {
        let pool = RecordBuffers::new(2 * GRANULE);
        let a = filled(&pool, GRANULE, 0);
        let b = filled(&pool, GRANULE, 0);
        let c = filled(&pool, GRANULE, 0);
        drop((a, b, c));
        assert_eq!(pool.idle_bytes(), 2 * GRANULE, "the third is freed");
        let big = pool.take(3 * GRANULE);
        assert!(big.buf.capacity() >= 3 * GRANULE);
        assert_eq!(pool.idle_bytes(), 2 * GRANULE, "the small ones stay");
    }

    #[test]
    fn idle_buffers_are_released_after_a_quiet_period_only() {
        let pool = RecordBuffers::default();
        drop(filled(&pool, MIN_REUSED_RECORD, 0));
        pool.release_if_unused_for(Duration::from_secs(3600));
        assert!(pool.idle_bytes() > 0, "taken within the period: kept");
        pool.release_if_unused_for(Duration::ZERO);
        assert_eq!(pool.idle_bytes(), 0, "unused for a whole period: freed");
    }

    /// Records below, at and above the threshold, one fragment or several, written
    /// in pieces of every size, come out whole through `read_record` with reuse; a
    /// stream cut inside a reused record is a truncated record.
    #[tokio::test]
    async fn records_read_into_reused_buffers_come_out_whole() {
        use crate::record::{frame, RecordDecoder, RecordError};
        use tokio::io::AsyncWriteExt;
        let sizes = [
            0,
            5,
            MIN_REUSED_RECORD - 1,
            MIN_REUSED_RECORD,
            (1 << 20) + 212,
            300_001,
            (1 << 20) + 212,
        ];
        let records: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (j * 31 + i) as u8).collect())
            .collect();
        for (max_fragment, piece) in [(usize::MAX, 1), (usize::MAX, 65_537), (100_000, 4096)] {
            let mut wire = Vec::new();
            for r in &records {
                for f in frame(vec![Bytes::from(r.clone())], max_fragment) {
                    wire.extend_from_slice(&f);
                }
            }
            let (mut tx, mut rx) = tokio::io::duplex(256 * 1024);
            let cut = wire.len() - 10;
            let writer = tokio::spawn(async move {
                // The first bytes one at a time (headers split), then in pieces; the
                // last 10 bytes never sent.
                let (head, rest) = wire[..cut].split_at(64);
                for b in head {
                    tx.write_all(std::slice::from_ref(b)).await.unwrap();
                }
                for chunk in rest.chunks(piece.max(1)) {
                    tx.write_all(chunk).await.unwrap();
                }
            });
            let pool = RecordBuffers::default();
            let mut dec = RecordDecoder::new(4 << 20);
            let mut buf = bytes::BytesMut::new();
            for want in &records[..records.len() - 1] {
                let got = crate::tcp::read_record(&mut rx, &mut dec, &mut buf, Some(&pool))
                    .await
                    .unwrap()
                    .expect("a record");
                assert_eq!(
                    &got[..],
                    &want[..],
                    "fragments of {max_fragment}, pieces of {piece}"
                );
            }
            let cut_short = crate::tcp::read_record(&mut rx, &mut dec, &mut buf, Some(&pool)).await;
            let err = cut_short.expect_err("the last record is cut short");
            let inner = err.get_ref().and_then(|e| e.downcast_ref::<RecordError>());
            assert!(
                matches!(inner, Some(RecordError::TruncatedRecord { .. })),
                "{err:?}"
            );
            writer.await.unwrap();
            if max_fragment == usize::MAX {
                assert!(
                    pool.idle_bytes() >= 1 << 20,
                    "large records' buffers came back"
                );
            }
        }
    }

    #[test]
    fn a_record_outliving_its_pool_is_freed_on_its_own() {
        let pool = RecordBuffers::default();
        let rec = filled(&pool, MIN_REUSED_RECORD, 7);
        drop(pool);
        assert_eq!(rec[0], 7);
        drop(rec);
    }
}

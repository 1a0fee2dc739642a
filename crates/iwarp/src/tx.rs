//! The transmit batch: FPDUs as a gather list of header bytes and payload `Bytes`.

use std::ops::Range;

use bytes::Bytes;

/// One piece of a [`TxBatch`].
#[derive(Debug, Clone)]
enum Chunk {
    /// Bytes in the batch's scratch buffer (headers, pad, CRC, copied payload).
    Scratch(Range<usize>),
    /// Caller-owned payload, referenced without a copy.
    Data(Bytes),
}

/// FPDUs ready for the socket, as a gather list. Filled by
/// [`crate::Connection::poll_transmit`], written by the driver with vectored writes.
#[derive(Debug, Default)]
pub struct TxBatch {
    scratch: Vec<u8>,
    chunks: Vec<Chunk>,
    len: usize,
}

impl TxBatch {
    /// An empty batch.
    pub fn new() -> TxBatch {
        TxBatch::default()
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the batch, keeping its allocations. Drops its references to the
    /// payload (`Bytes` of posted work): a driver clears a batch as soon as it is
    /// written, since those work requests may have completed already and their
    /// sources must not be held by an idle connection.
    pub fn clear(&mut self) {
        self.scratch.clear();
        self.chunks.clear();
        self.len = 0;
    }

    /// Appends bytes to scratch, as their own chunk (merged with a preceding scratch
    /// chunk when adjacent).
    pub(crate) fn push_scratch(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let start = self.scratch.len();
        f(&mut self.scratch);
        let end = self.scratch.len();
        if end == start {
            return;
        }
        self.len += end - start;
        if let Some(Chunk::Scratch(r)) = self.chunks.last_mut() {
            if r.end == start {
                r.end = end;
                return;
            }
        }
        self.chunks.push(Chunk::Scratch(start..end));
    }

    /// Appends caller-owned bytes by reference.
    pub(crate) fn push_data(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        self.chunks.push(Chunk::Data(b));
    }

    /// Scratch bytes written since `mark` (for CRC over copied data).
    pub(crate) fn scratch_len(&self) -> usize {
        self.scratch.len()
    }

    /// Scratch bytes in `r`.
    pub(crate) fn scratch(&self, r: Range<usize>) -> &[u8] {
        &self.scratch[r]
    }

    /// The chunks as byte slices, in order.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        self.chunks.iter().map(move |c| match c {
            Chunk::Scratch(r) => &self.scratch[r.clone()],
            Chunk::Data(b) => &b[..],
        })
    }

    /// Flattens the batch (tests, diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        v
    }
}

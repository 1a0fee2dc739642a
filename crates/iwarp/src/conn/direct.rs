//! Direct placement: the payload of a large tagged segment (RDMA Write, Read Response)
//! goes from the socket straight into the registered region, with no pass through the
//! receive buffer (RFC 5041 §1: "the data is placed directly into the ULP buffer").
//!
//! Only with CRC off (a CRC must cover the bytes before they are trusted, and with CRC
//! on they are read twice anyway). The segment is checked exactly as on the normal
//! path before a byte is placed; when a check fails, nothing is done here and the
//! normal path answers the complete FPDU with its Terminate.
//!
//! Protocol: after [`Connection::handle_input`], the driver asks
//! [`Connection::poll_direct`]. If it returns a [`DirectPlacement`], the driver reads
//! exactly `len` bytes into `region` at `offset`, then calls
//! [`Connection::direct_done`] (or reports EOF / the transport error). The FPDU's pad
//! and CRC field then arrive through `handle_input` as usual.

use bytes::BytesMut;
use rdma::software::ResolvedRegion;
use rdma::{Access, STag, WcStatus};

use super::Connection;
use crate::error::ProtocolError;
use crate::wire::ddp::{DdpHeader, Opcode, SegmentHeader, TAGGED_HEADER_LEN};
use crate::wire::mpa::{self, CRC_LEN, FPDU_HEADER_LEN};

/// Bytes the driver must read from the stream into `region` at `offset`.
#[derive(Clone)]
pub struct DirectPlacement {
    /// The checked target region.
    pub region: ResolvedRegion,
    /// Region offset of the first byte.
    pub offset: u64,
    /// Exactly this many bytes (the rest of the segment's payload).
    pub len: usize,
}

pub(super) struct DirectState {
    read_response: bool,
    last: bool,
    payload_len: u64,
    trailer: usize,
}

impl Connection {
    /// Offers the rest of a large tagged segment whose header is buffered in `buf`
    /// for direct placement (consuming the header and the payload bytes already in
    /// `buf`). `None`: keep reading into `buf`.
    pub fn poll_direct(&mut self, buf: &mut BytesMut) -> Option<DirectPlacement> {
        let min = self.limits.direct_placement_min;
        if self.crc || min == 0 || !self.is_open() || self.direct.is_some() {
            return None;
        }
        if self.skip_trailer > 0 || buf.len() < FPDU_HEADER_LEN + TAGGED_HEADER_LEN {
            return None;
        }
        let ulpdu_len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
        let payload_len = ulpdu_len.checked_sub(TAGGED_HEADER_LEN)?;
        let hdr_end = FPDU_HEADER_LEN + TAGGED_HEADER_LEN;
        let (h, _) = SegmentHeader::parse(&buf[FPDU_HEADER_LEN..hdr_end]).ok()?;
        let DdpHeader::Tagged { stag, to } = h.ddp else {
            return None;
        };
        let have = buf.len() - hdr_end;
        if have >= payload_len || payload_len - have < min {
            return None;
        }
        // The same checks as `on_write` / `on_read_response`.
        let plen = payload_len as u64;
        let region = match h.opcode {
            Opcode::RDMA_WRITE => self
                .pd
                .resolve(STag(stag), to, plen, Access::REMOTE_WRITE)
                .ok()?,
            Opcode::READ_RESPONSE => {
                let r = self.reads_out.front()?;
                if stag != r.sink_stag
                    || Some(to) != r.sink_to.checked_add(r.received)
                    || r.received + plen > r.len
                    || (h.last && r.received + plen != r.len)
                {
                    return None;
                }
                r.sink.clone()
            }
            _ => return None,
        };
        let _ = buf.split_to(hdr_end);
        let head = buf.split_to(have);
        if let Err(e) = region.place(to, &head) {
            self.fail(ProtocolError::Tagged(e));
            return None;
        }
        self.direct = Some(DirectState {
            read_response: h.opcode == Opcode::READ_RESPONSE,
            last: h.last,
            payload_len: plen,
            trailer: mpa::pad_len(ulpdu_len) + CRC_LEN,
        });
        Some(DirectPlacement {
            region,
            offset: to + have as u64,
            len: payload_len - have,
        })
    }

    /// Stream bytes that complete what [`Connection::handle_input`] left pending: the
    /// pad and CRC field of a directly placed FPDU, or the rest of the partial FPDU at
    /// the front of `buf` (0 when even its length field is incomplete). A driver that
    /// reads no more than this plus a header's worth keeps a run of large segments on
    /// the direct path instead of buffering (and copying) the segments behind.
    pub fn missing_fpdu_bytes(&self, buf: &[u8]) -> usize {
        if self.skip_trailer > 0 {
            return self.skip_trailer;
        }
        if buf.len() < FPDU_HEADER_LEN {
            return 0;
        }
        let ulpdu_len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
        mpa::fpdu_len(ulpdu_len).saturating_sub(buf.len())
    }

    /// The driver placed all bytes of the last [`DirectPlacement`].
    pub fn direct_done(&mut self) {
        let Some(d) = self.direct.take() else {
            return;
        };
        self.skip_trailer = d.trailer;
        if !self.is_open() || !d.read_response {
            return;
        }
        if let Some(r) = self.reads_out.front_mut() {
            r.received += d.payload_len;
            if d.last {
                let seq = r.seq;
                let n = r.len as usize;
                self.reads_out.pop_front();
                self.complete_seq(seq, WcStatus::Success, Some(n));
            }
        }
    }
}

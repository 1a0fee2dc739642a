//! MPA (RFC 5044) connection setup frames with RFC 6581 enhanced setup, and FPDU
//! framing (length, pad, CRC32c).
//!
//! Read first: RFC 5044 §7 (Request/Reply), §6 (FPDU format), RFC 6581 §5 (IRD/ORD).

use bytes::{Buf, Bytes, BytesMut};

use super::WireError;

/// `MPA ID Req Frame`.
pub const REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// `MPA ID Rep Frame`.
pub const REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// RFC 5044 §7.1: "Private Data Length ... MUST NOT exceed 512".
pub const MAX_PRIVATE_DATA: usize = 512;
/// Bytes of the fixed part of a Request/Reply (key, flags, rev, length).
pub const HEADER_LEN: usize = 20;

/// Flag bits of the MPA Request/Reply (byte 16).
pub mod flags {
    /// M: markers wanted.
    pub const MARKERS: u8 = 0x80;
    /// C: CRC wanted.
    pub const CRC: u8 = 0x40;
    /// R: reject (Reply only).
    pub const REJECT: u8 = 0x20;
    /// RFC 6581 enhanced connection setup (revision 2).
    pub const ENHANCED: u8 = 0x10;
}

/// Request or Reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// `MPA ID Req Frame`.
    Request,
    /// `MPA ID Rep Frame`.
    Reply,
}

/// An MPA Request or Reply frame (owned representation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpaFrame {
    /// Request or Reply.
    pub kind: FrameKind,
    /// The M, C, R and enhanced bits (other bits are reserved and dropped).
    pub flags: u8,
    /// Revision (1 or 2; other values are parsed and refused by the handshake).
    pub revision: u8,
    /// All private data, including the RFC 6581 IRD/ORD block when present.
    pub private_data: Bytes,
}

impl MpaFrame {
    /// Parses a frame from the start of `buf`. `Ok(None)`: need more bytes.
    /// Returns the frame and the bytes consumed.
    pub fn parse(buf: &[u8]) -> Result<Option<(MpaFrame, usize)>, WireError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let kind = if &buf[..16] == REQ_KEY {
            FrameKind::Request
        } else if &buf[..16] == REP_KEY {
            FrameKind::Reply
        } else {
            // RFC 5044 §7.1: the key identifies an MPA frame; anything else is not MPA.
            return Err(WireError::BadMpaKey);
        };
        let flags = buf[16] & 0xf0;
        let revision = buf[17];
        let pd_len = u16::from_be_bytes([buf[18], buf[19]]) as usize;
        if pd_len > MAX_PRIVATE_DATA {
            return Err(WireError::PrivateDataTooLong(pd_len));
        }
        let total = HEADER_LEN + pd_len;
        if buf.len() < total {
            return Ok(None);
        }
        Ok(Some((
            MpaFrame {
                kind,
                flags,
                revision,
                private_data: Bytes::copy_from_slice(&buf[HEADER_LEN..total]),
            },
            total,
        )))
    }

    /// Encoded length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.private_data.len()
    }

    /// Appends the encoding to `out`. The caller keeps private data within
    /// [`MAX_PRIVATE_DATA`] (longer data is truncated, never panics).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.kind {
            FrameKind::Request => REQ_KEY,
            FrameKind::Reply => REP_KEY,
        });
        out.push(self.flags);
        out.push(self.revision);
        let pd = &self.private_data[..self.private_data.len().min(MAX_PRIVATE_DATA)];
        out.extend_from_slice(&(pd.len() as u16).to_be_bytes());
        out.extend_from_slice(pd);
    }

    /// True if this is a revision 2 frame in enhanced mode.
    pub fn is_enhanced(&self) -> bool {
        self.revision == 2 && self.flags & flags::ENHANCED != 0
    }
}

/// The RFC 6581 §5 IRD/ORD block that starts enhanced private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// Peer-to-peer (RTR wanted): IRD word bit 0x8000.
    pub peer_to_peer: bool,
    /// Zero-length RTR bit: IRD word bit 0x4000.
    pub zero_length_rtr: bool,
    /// RTR as zero-length RDMA Write: ORD word bit 0x8000.
    pub rtr_write: bool,
    /// RTR as zero-length RDMA Read: ORD word bit 0x4000.
    pub rtr_read: bool,
}

impl IrdOrd {
    /// Encoded length.
    pub const LEN: usize = 4;
    /// RFC 6581 §5: "IRD ... 14 bits".
    pub const MASK: u16 = 0x3fff;

    /// Parses the first 4 bytes of enhanced private data.
    pub fn parse(pd: &[u8]) -> Result<IrdOrd, WireError> {
        let b = pd.get(..4).ok_or(WireError::Truncated)?;
        let ird = u16::from_be_bytes([b[0], b[1]]);
        let ord = u16::from_be_bytes([b[2], b[3]]);
        Ok(IrdOrd {
            ird: ird & Self::MASK,
            ord: ord & Self::MASK,
            peer_to_peer: ird & 0x8000 != 0,
            zero_length_rtr: ird & 0x4000 != 0,
            rtr_write: ord & 0x8000 != 0,
            rtr_read: ord & 0x4000 != 0,
        })
    }

    /// Appends the 4-byte encoding.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut ird = self.ird & Self::MASK;
        let mut ord = self.ord & Self::MASK;
        if self.peer_to_peer {
            ird |= 0x8000;
        }
        if self.zero_length_rtr {
            ird |= 0x4000;
        }
        if self.rtr_write {
            ord |= 0x8000;
        }
        if self.rtr_read {
            ord |= 0x4000;
        }
        out.extend_from_slice(&ird.to_be_bytes());
        out.extend_from_slice(&ord.to_be_bytes());
    }
}

/// Bytes of the MPA length field.
pub const FPDU_HEADER_LEN: usize = 2;
/// Bytes of the CRC field.
pub const CRC_LEN: usize = 4;

/// RFC 5044 §6: "The PAD field ... makes the FPDU an integral multiple of four octets".
/// Pad length for a ULPDU of `ulpdu_len` bytes.
pub fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (FPDU_HEADER_LEN + ulpdu_len) % 4) % 4
}

/// Total FPDU length (header, ULPDU, pad, CRC) for a ULPDU of `ulpdu_len` bytes.
pub fn fpdu_len(ulpdu_len: usize) -> usize {
    FPDU_HEADER_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// The CRC field value as it goes on the wire.
///
/// RFC 5044 §6 computes CRC32c over length, ULPDU and pad. Linux siw and Wireshark put
/// the CRC value in little-endian byte order (docs/linux-facts.md, "siw CRC byte
/// order"), so we do too.
pub fn crc_field(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// One FPDU cut out of the receive stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Fpdu {
    /// The ULPDU (DDP segment).
    pub ulpdu: Bytes,
}

/// Cuts the next FPDU from the front of `buf` (consuming it). `Ok(None)`: need more
/// bytes, nothing consumed. With `check_crc`, a CRC mismatch is an error.
pub fn take_fpdu(buf: &mut BytesMut, check_crc: bool) -> Result<Option<Fpdu>, WireError> {
    if buf.len() < FPDU_HEADER_LEN {
        return Ok(None);
    }
    let ulpdu_len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
    let pad = pad_len(ulpdu_len);
    let total = fpdu_len(ulpdu_len);
    if buf.len() < total {
        return Ok(None);
    }
    if check_crc {
        let covered = FPDU_HEADER_LEN + ulpdu_len + pad;
        let want = crc32c::crc32c(&buf[..covered]);
        let got = u32::from_le_bytes([
            buf[covered],
            buf[covered + 1],
            buf[covered + 2],
            buf[covered + 3],
        ]);
        if want != got {
            return Err(WireError::BadCrc { got, want });
        }
    }
    let mut frame = buf.split_to(total);
    frame.advance(FPDU_HEADER_LEN);
    frame.truncate(ulpdu_len);
    Ok(Some(Fpdu {
        ulpdu: frame.freeze(),
    }))
}

/// Encodes a complete FPDU around `ulpdu` (used by tests, Terminate and small frames;
/// the data path uses the gather form in `conn`).
pub fn encode_fpdu(ulpdu: &[u8], crc: bool, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&(ulpdu.len() as u16).to_be_bytes());
    out.extend_from_slice(ulpdu);
    out.extend(std::iter::repeat(0).take(pad_len(ulpdu.len())));
    let c = if crc {
        crc32c::crc32c(&out[start..])
    } else {
        0
    };
    out.extend_from_slice(&crc_field(c));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// linux-6.1-siw-nfs-client-knfsd.pcap frame 4: the kernel client's MPA Request.
    #[test]
    fn parses_linux_client_mpa_request() {
        let b = hex("4d504120494420526571204672616d651002000c00800000f6ab0e1801010303");
        let (f, n) = MpaFrame::parse(&b).unwrap().unwrap();
        assert_eq!(n, 32);
        assert_eq!(f.kind, FrameKind::Request);
        assert!(f.is_enhanced());
        assert_eq!(f.flags & flags::CRC, 0);
        let io = IrdOrd::parse(&f.private_data).unwrap();
        assert_eq!((io.ird, io.ord, io.peer_to_peer), (128, 0, false));
        assert_eq!(&f.private_data[4..8], &[0xf6, 0xab, 0x0e, 0x18]);
        let mut out = Vec::new();
        f.emit(&mut out);
        assert_eq!(out, b);
    }

    /// linux-6.1-siw-nfs-client-knfsd.pcap: knfsd's MPA Reply.
    #[test]
    fn parses_knfsd_mpa_reply() {
        let b = hex("4d504120494420526570204672616d651002000c00000080f6ab0e1801000303");
        let (f, _) = MpaFrame::parse(&b).unwrap().unwrap();
        assert_eq!(f.kind, FrameKind::Reply);
        let io = IrdOrd::parse(&f.private_data).unwrap();
        assert_eq!((io.ird, io.ord), (0, 128));
    }

    #[test]
    fn incomplete_frames_need_more() {
        let b = hex("4d504120494420526571204672616d651002000c0080");
        assert_eq!(MpaFrame::parse(&b).unwrap(), None);
        assert_eq!(MpaFrame::parse(&b[..5]).unwrap(), None);
    }

    #[test]
    fn rfc5044_private_data_over_512_is_refused() {
        let mut b = REQ_KEY.to_vec();
        b.extend_from_slice(&[0x10, 2, 0x02, 0x01]);
        assert_eq!(MpaFrame::parse(&b), Err(WireError::PrivateDataTooLong(513)));
    }

    #[test]
    fn fpdu_pad_makes_multiple_of_four() {
        for n in 0..16 {
            assert_eq!(fpdu_len(n) % 4, 0, "{n}");
        }
    }

    #[test]
    fn fpdu_roundtrip_with_crc_and_bad_crc_detected() {
        let mut out = Vec::new();
        encode_fpdu(b"hello", true, &mut out);
        let mut buf = BytesMut::from(&out[..]);
        let f = take_fpdu(&mut buf, true).unwrap().unwrap();
        assert_eq!(&f.ulpdu[..], b"hello");
        assert!(buf.is_empty());
        let n = out.len();
        out[n - 1] ^= 1;
        let mut buf = BytesMut::from(&out[..]);
        assert!(matches!(
            take_fpdu(&mut buf, true),
            Err(WireError::BadCrc { .. })
        ));
    }
}

//! MPA connection setup as per-phase state types (RFC 5044 §7, RFC 6581).
//!
//! ```text
//!  initiator                              responder
//!  Initiator::new ── MPA Request ──────▶  Responder::handle_request -> IncomingRequest
//!                                          .accept() / .reject()
//!  Initiator::handle_reply ◀── MPA Reply ─┘
//!        -> Negotiated                     -> Negotiated
//! ```
//!
//! We speak revision 2 with enhanced setup (IRD/ORD) and accept revision 1 peers. We
//! never use markers; a peer that asks for them is rejected (as Linux siw does).

use bytes::{Bytes, BytesMut};
use rdma::{ConnectParams, PeerParams};

use crate::wire::mpa::{self, flags, FrameKind, IrdOrd, MpaFrame};
use crate::wire::WireError;

/// Why setup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Malformed frame.
    #[error("malformed MPA frame: {0}")]
    Wire(#[from] WireError),
    /// A Request where a Reply was due, or the reverse.
    #[error("unexpected MPA frame kind")]
    UnexpectedFrame,
    /// Revision other than 1 or 2.
    #[error("unsupported MPA revision {0}")]
    UnsupportedRevision(u8),
    /// The peer wants markers, which we refuse.
    #[error("peer requires MPA markers")]
    MarkersRequired,
    /// The peer rejected us.
    #[error("rejected by peer")]
    Rejected {
        /// The reject's private data.
        private_data: Bytes,
    },
    /// Enhanced mode with fewer than 4 bytes of private data.
    #[error("enhanced MPA frame without IRD/ORD")]
    MissingIrdOrd,
    /// Our private data is too long.
    #[error("private data too long ({0} bytes)")]
    PrivateDataTooLong(usize),
}

/// The outcome of setup, from which a [`crate::Connection`] is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// We sent the Request.
    pub active: bool,
    /// CRC32c in use on FPDUs, both directions.
    pub crc: bool,
    /// Inbound Read Requests we accept outstanding (our IRD).
    pub ird: u16,
    /// Outbound Read Requests we may have outstanding: min(our ORD, peer IRD).
    pub ord: u16,
    /// The peer's revision.
    pub peer_revision: u8,
    /// What the peer offered.
    pub peer: PeerParams,
}

fn max_user_pd(enhanced: bool) -> usize {
    mpa::MAX_PRIVATE_DATA - if enhanced { IrdOrd::LEN } else { 0 }
}

fn split_pd(frame: &MpaFrame) -> Result<(Option<IrdOrd>, Bytes), HandshakeError> {
    if frame.is_enhanced() {
        if frame.private_data.len() < IrdOrd::LEN {
            return Err(HandshakeError::MissingIrdOrd);
        }
        let io = IrdOrd::parse(&frame.private_data)?;
        Ok((Some(io), frame.private_data.slice(IrdOrd::LEN..)))
    } else {
        Ok((None, frame.private_data.clone()))
    }
}

/// The initiator, after sending its Request and until the Reply.
#[derive(Debug)]
pub struct Initiator {
    want_crc: bool,
    params: ConnectParams,
}

impl Initiator {
    /// Builds the Request (appended to `out`).
    pub fn new(
        params: ConnectParams,
        want_crc: bool,
        out: &mut Vec<u8>,
    ) -> Result<Initiator, HandshakeError> {
        if params.private_data.len() > max_user_pd(true) {
            return Err(HandshakeError::PrivateDataTooLong(
                params.private_data.len(),
            ));
        }
        let mut pd = Vec::with_capacity(IrdOrd::LEN + params.private_data.len());
        // RFC 6581 §5: the initiator sends its IRD and ORD. Linux knfsd refuses IRD 0,
        // so we always offer at least 1.
        IrdOrd {
            ird: params.ird.max(1),
            ord: params.ord,
            ..IrdOrd::default()
        }
        .emit(&mut pd);
        pd.extend_from_slice(&params.private_data);
        let mut f = flags::ENHANCED;
        if want_crc {
            f |= flags::CRC;
        }
        MpaFrame {
            kind: FrameKind::Request,
            flags: f,
            revision: 2,
            private_data: pd.into(),
        }
        .emit(out);
        Ok(Initiator { want_crc, params })
    }

    /// Feeds received bytes; consumes the Reply from `buf` once complete.
    /// `Ok(None)`: need more bytes.
    pub fn handle_reply(&self, buf: &mut BytesMut) -> Result<Option<Negotiated>, HandshakeError> {
        let Some((frame, n)) = MpaFrame::parse(buf)? else {
            return Ok(None);
        };
        let _ = buf.split_to(n);
        if frame.kind != FrameKind::Reply {
            return Err(HandshakeError::UnexpectedFrame);
        }
        if frame.revision != 1 && frame.revision != 2 {
            return Err(HandshakeError::UnsupportedRevision(frame.revision));
        }
        let (io, user_pd) = split_pd(&frame)?;
        if frame.flags & flags::REJECT != 0 {
            return Err(HandshakeError::Rejected {
                private_data: user_pd,
            });
        }
        if frame.flags & flags::MARKERS != 0 {
            return Err(HandshakeError::MarkersRequired);
        }
        let (peer_ird, peer_ord) = io.map(|i| (i.ird, i.ord)).unwrap_or((0, 0));
        // Revision 1 peers say nothing about IRD; assume they can serve our ORD.
        let ord = if io.is_some() {
            self.params.ord.min(peer_ird)
        } else {
            self.params.ord
        };
        Ok(Some(Negotiated {
            active: true,
            // RFC 5044 §7.1.2: CRC is used when either side asked for it.
            crc: self.want_crc || frame.flags & flags::CRC != 0,
            ird: self.params.ird.max(1),
            ord,
            peer_revision: frame.revision,
            peer: PeerParams {
                private_data: user_pd,
                ird: peer_ird,
                ord: peer_ord,
                addr: None,
            },
        }))
    }
}

/// The responder, waiting for a Request.
#[derive(Debug, Default)]
pub struct Responder;

impl Responder {
    /// Feeds received bytes; consumes the Request from `buf` once complete.
    pub fn handle_request(buf: &mut BytesMut) -> Result<Option<IncomingRequest>, HandshakeError> {
        let Some((frame, n)) = MpaFrame::parse(buf)? else {
            return Ok(None);
        };
        let _ = buf.split_to(n);
        if frame.kind != FrameKind::Request {
            return Err(HandshakeError::UnexpectedFrame);
        }
        if frame.revision == 0 {
            return Err(HandshakeError::UnsupportedRevision(0));
        }
        let (io, user_pd) = split_pd(&frame)?;
        let (ird, ord) = io.map(|i| (i.ird, i.ord)).unwrap_or((0, 0));
        Ok(Some(IncomingRequest {
            frame,
            enhanced_peer: io.is_some(),
            peer: PeerParams {
                private_data: user_pd,
                ird,
                ord,
                addr: None,
            },
        }))
    }
}

/// A parsed Request waiting for the ULP's accept or reject.
#[derive(Debug, Clone)]
pub struct IncomingRequest {
    frame: MpaFrame,
    enhanced_peer: bool,
    /// What the peer offered.
    pub peer: PeerParams,
}

impl IncomingRequest {
    /// The revision we answer with: ours (2) or the peer's if lower (RFC 6581 §5).
    fn reply_revision(&self) -> u8 {
        self.frame.revision.min(2)
    }

    /// True if the peer asked for markers (we will have to reject).
    pub fn wants_markers(&self) -> bool {
        self.frame.flags & flags::MARKERS != 0
    }

    /// True if the peer asked for CRC.
    pub fn wants_crc(&self) -> bool {
        self.frame.flags & flags::CRC != 0
    }

    /// Accepts: appends the Reply to `out`. Fails (and the caller should send
    /// [`IncomingRequest::reject`]) if the peer wants markers.
    pub fn accept(
        &self,
        params: &ConnectParams,
        want_crc: bool,
        out: &mut Vec<u8>,
    ) -> Result<Negotiated, HandshakeError> {
        if self.wants_markers() {
            return Err(HandshakeError::MarkersRequired);
        }
        let rev = self.reply_revision();
        let enhanced = rev == 2 && self.enhanced_peer;
        if params.private_data.len() > max_user_pd(enhanced) {
            return Err(HandshakeError::PrivateDataTooLong(
                params.private_data.len(),
            ));
        }
        let crc = want_crc || self.wants_crc();
        let ird = params.ird.max(1);
        let ord = if enhanced {
            params.ord.min(self.peer.ird)
        } else {
            params.ord
        };
        let mut pd = Vec::new();
        let mut f = 0;
        if enhanced {
            f |= flags::ENHANCED;
            // RFC 6581 §5: the responder answers with its own IRD and an ORD no larger
            // than the initiator's IRD.
            IrdOrd {
                ird,
                ord,
                ..IrdOrd::default()
            }
            .emit(&mut pd);
        }
        if crc {
            f |= flags::CRC;
        }
        pd.extend_from_slice(&params.private_data);
        MpaFrame {
            kind: FrameKind::Reply,
            flags: f,
            revision: rev,
            private_data: pd.into(),
        }
        .emit(out);
        Ok(Negotiated {
            active: false,
            crc,
            ird,
            ord,
            peer_revision: self.frame.revision,
            peer: self.peer.clone(),
        })
    }

    /// Rejects: appends a Reply with R set and `private_data` to `out`.
    pub fn reject(&self, private_data: &[u8], out: &mut Vec<u8>) {
        let rev = self.reply_revision();
        let enhanced = rev == 2 && self.enhanced_peer;
        let mut pd = Vec::new();
        let mut f = flags::REJECT;
        if enhanced {
            f |= flags::ENHANCED;
            IrdOrd::default().emit(&mut pd);
        }
        let n = private_data.len().min(max_user_pd(enhanced));
        pd.extend_from_slice(&private_data[..n]);
        MpaFrame {
            kind: FrameKind::Reply,
            flags: f,
            revision: rev,
            private_data: pd.into(),
        }
        .emit(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pd: &'static [u8], ird: u16, ord: u16) -> ConnectParams {
        ConnectParams {
            private_data: Bytes::from_static(pd),
            ird,
            ord,
            recvs: Vec::new(),
        }
    }

    #[test]
    fn rev2_enhanced_setup_negotiates_ird_ord_and_crc() {
        let mut req = Vec::new();
        let ini = Initiator::new(params(b"hello", 8, 4), true, &mut req).unwrap();
        let mut buf = BytesMut::from(&req[..]);
        let inc = Responder::handle_request(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        assert_eq!(&inc.peer.private_data[..], b"hello");
        assert_eq!((inc.peer.ird, inc.peer.ord), (8, 4));
        let mut rep = Vec::new();
        let n2 = inc
            .accept(&params(b"world", 2, 16), false, &mut rep)
            .unwrap();
        assert!(n2.crc);
        assert_eq!((n2.ird, n2.ord), (2, 8));
        let mut buf = BytesMut::from(&rep[..]);
        let n1 = ini.handle_reply(&mut buf).unwrap().unwrap();
        assert!(n1.crc);
        assert_eq!(&n1.peer.private_data[..], b"world");
        assert_eq!((n1.ird, n1.ord), (8, 2));
    }

    #[test]
    fn reject_surfaces_private_data() {
        let mut req = Vec::new();
        let ini = Initiator::new(params(b"", 1, 1), false, &mut req).unwrap();
        let inc = Responder::handle_request(&mut BytesMut::from(&req[..]))
            .unwrap()
            .unwrap();
        let mut rep = Vec::new();
        inc.reject(b"go away", &mut rep);
        let err = ini.handle_reply(&mut BytesMut::from(&rep[..])).unwrap_err();
        assert_eq!(
            err,
            HandshakeError::Rejected {
                private_data: Bytes::from_static(b"go away")
            }
        );
    }

    #[test]
    fn rev1_request_gets_rev1_reply_without_ird_ord() {
        let mut req = Vec::new();
        MpaFrame {
            kind: FrameKind::Request,
            flags: 0,
            revision: 1,
            private_data: Bytes::from_static(b"abc"),
        }
        .emit(&mut req);
        let inc = Responder::handle_request(&mut BytesMut::from(&req[..]))
            .unwrap()
            .unwrap();
        assert_eq!(&inc.peer.private_data[..], b"abc");
        let mut rep = Vec::new();
        inc.accept(&params(b"xy", 4, 4), false, &mut rep).unwrap();
        let (f, _) = MpaFrame::parse(&rep).unwrap().unwrap();
        assert_eq!(f.revision, 1);
        assert_eq!(f.flags, 0);
        assert_eq!(&f.private_data[..], b"xy");
    }

    #[test]
    fn markers_are_refused() {
        let mut req = Vec::new();
        MpaFrame {
            kind: FrameKind::Request,
            flags: flags::MARKERS | flags::ENHANCED,
            revision: 2,
            private_data: Bytes::from_static(&[0, 1, 0, 1]),
        }
        .emit(&mut req);
        let inc = Responder::handle_request(&mut BytesMut::from(&req[..]))
            .unwrap()
            .unwrap();
        assert_eq!(
            inc.accept(&params(b"", 1, 1), false, &mut Vec::new()),
            Err(HandshakeError::MarkersRequired)
        );
    }

    /// knfsd's real Reply (linux-6.1-siw pcap): IRD 0, ORD 128, CRC off.
    #[test]
    fn knfsd_reply_gives_zero_ord_to_us() {
        let mut req = Vec::new();
        let ini = Initiator::new(params(b"", 16, 16), false, &mut req).unwrap();
        let rep: Vec<u8> = [
            &b"MPA ID Rep Frame"[..],
            &[0x10, 0x02, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x80],
            &[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03],
        ]
        .concat();
        let n = ini
            .handle_reply(&mut BytesMut::from(&rep[..]))
            .unwrap()
            .unwrap();
        assert!(!n.crc);
        assert_eq!(n.ord, 0);
        assert_eq!(n.peer.ord, 128);
        assert_eq!(n.peer.private_data.len(), 8);
    }
}

//! Sessions (RFC 8881 §2.10): the channel attributes CREATE_SESSION negotiates
//! (§18.36.3, §18.36.4) and what a session holds.

use nfs4::session::ChannelAttrs4;
use nfs4::{ClientId4, NfsStat4, SessionId4};

use super::slots::SlotTable;

/// What the server supports on a fore channel; a client's request is clamped to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLimits {
    /// Largest request (`ca_maxrequestsize`), RPC header included.
    pub max_request: u32,
    /// Largest reply (`ca_maxresponsesize`).
    pub max_response: u32,
    /// Largest reply a slot caches (`ca_maxresponsesize_cached`).
    pub max_response_cached: u32,
    /// Most operations per COMPOUND (`ca_maxoperations`).
    pub max_ops: u32,
    /// Most slots (`ca_maxrequests`).
    pub max_requests: u32,
}

/// Smallest `ca_maxrequestsize` a channel can work with: the sizes include the RPC
/// headers (§18.36.2), and the smallest useful request is an RPC call header with
/// AUTH_NONE (40 bytes) and a COMPOUND of SEQUENCE alone with an empty tag (48), as
/// knfsd counts (`NFSD_MIN_REQ_HDR_SEQ_SZ`).
pub const MIN_REQUEST: u32 = 40 + 48;

/// Smallest `ca_maxresponsesize`: an RPC reply header with an AUTH_NONE verifier (24
/// bytes) and the reply of a COMPOUND of SEQUENCE alone (56). Larger replies are then
/// NFS4ERR_REP_TOO_BIG, operation by operation ([`crate::v4`]'s reply limits).
pub const MIN_RESPONSE: u32 = 24 + 56;

impl ChannelLimits {
    /// The fore channel of this server: 1 MiB of data plus headroom per request and
    /// reply (READ and WRITE of [`crate::nfs::MAX_IO`]), 16 KiB cached replies (the
    /// non-idempotent operations' replies are small), 64 operations (the Linux client
    /// sends at most about 20), 32 slots.
    pub const FORE: ChannelLimits = ChannelLimits {
        max_request: crate::nfs::MAX_IO + 64 * 1024,
        max_response: crate::nfs::MAX_IO + 64 * 1024,
        max_response_cached: 16 * 1024,
        max_ops: 64,
        max_requests: 32,
    };

    /// The back channel (not used yet: no callbacks are sent), clamped as knfsd
    /// does to small messages and few slots.
    pub const BACK: ChannelLimits = ChannelLimits {
        max_request: 4096,
        max_response: 4096,
        max_response_cached: 0,
        max_ops: 2,
        max_requests: 1,
    };

    /// The attributes granted for `asked` (RFC 8881 §18.36.3: the server "MAY return
    /// a smaller value"; a larger one is never granted): each limit is the smaller of
    /// the client's and the server's. No header padding (`ca_headerpadsize` 0) and no
    /// RDMA inbound read depth are granted (`ca_rdma_ird` is for RDMA-mode
    /// connections, §2.10.6.2, not negotiated here yet).
    ///
    /// NFS4ERR_TOOSMALL (§18.36.3: the values asked for are too small for the
    /// server) if the client's message sizes cannot hold a COMPOUND of SEQUENCE
    /// alone, or it asks for no slot or no operation. A `ca_maxresponsesize_cached`
    /// too small for any reply is granted: each SEQUENCE that asks for caching is
    /// then NFS4ERR_REP_TOO_BIG_TO_CACHE (§18.46.3; pynfs CSESS27).
    pub fn negotiate(&self, asked: &ChannelAttrs4) -> Result<ChannelAttrs4, NfsStat4> {
        if asked.ca_maxrequestsize < MIN_REQUEST
            || asked.ca_maxresponsesize < MIN_RESPONSE
            || asked.ca_maxrequests == 0
            || asked.ca_maxoperations == 0
        {
            return Err(NfsStat4::NFS4ERR_TOOSMALL);
        }
        Ok(ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: asked.ca_maxrequestsize.min(self.max_request),
            ca_maxresponsesize: asked.ca_maxresponsesize.min(self.max_response),
            ca_maxresponsesize_cached: asked
                .ca_maxresponsesize_cached
                .min(self.max_response_cached),
            ca_maxoperations: asked.ca_maxoperations.min(self.max_ops),
            ca_maxrequests: asked.ca_maxrequests.min(self.max_requests),
            ca_rdma_ird: None,
        })
    }
}

/// One session.
#[derive(Debug)]
pub struct Session {
    /// Its id (`csr_sessionid`).
    pub id: SessionId4,
    /// The client it belongs to.
    pub client: ClientId4,
    /// Fore channel attributes as granted.
    pub fore: ChannelAttrs4,
    /// Back channel attributes as granted.
    pub back: ChannelAttrs4,
    /// The fore channel's slots and reply cache.
    pub slots: SlotTable,
    /// What the session holds of the memory budget: its reply caches, full
    /// ([`super::budget::session_cost`]).
    pub charge: Option<rpcrdma::memory::Charge>,
}

impl Session {
    /// A session of `client` with the attributes granted.
    pub fn new(
        id: SessionId4,
        client: ClientId4,
        fore: ChannelAttrs4,
        back: ChannelAttrs4,
    ) -> Session {
        let slots = SlotTable::new(fore.ca_maxrequests, fore.ca_maxresponsesize_cached as usize);
        Session {
            id,
            client,
            fore,
            back,
            slots,
            charge: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(req: u32, resp: u32, cached: u32, ops: u32, reqs: u32) -> ChannelAttrs4 {
        ChannelAttrs4 {
            ca_headerpadsize: 256,
            ca_maxrequestsize: req,
            ca_maxresponsesize: resp,
            ca_maxresponsesize_cached: cached,
            ca_maxoperations: ops,
            ca_maxrequests: reqs,
            ca_rdma_ird: Some(16),
        }
    }

    #[test]
    fn rfc8881_18_36_3_attributes_are_clamped_to_the_server_never_raised() {
        let got = ChannelLimits::FORE
            .negotiate(&asked(u32::MAX, u32::MAX, u32::MAX, 1000, 1000))
            .unwrap();
        let f = ChannelLimits::FORE;
        assert_eq!(got.ca_maxrequestsize, f.max_request);
        assert_eq!(got.ca_maxresponsesize, f.max_response);
        assert_eq!(got.ca_maxresponsesize_cached, f.max_response_cached);
        assert_eq!(got.ca_maxoperations, f.max_ops);
        assert_eq!(got.ca_maxrequests, f.max_requests);
        assert_eq!(got.ca_headerpadsize, 0);
        assert_eq!(got.ca_rdma_ird, None);
        let small = ChannelLimits::FORE
            .negotiate(&asked(4096, 8192, 100, 8, 2))
            .unwrap();
        assert_eq!(
            (
                small.ca_maxrequestsize,
                small.ca_maxresponsesize,
                small.ca_maxresponsesize_cached,
                small.ca_maxoperations,
                small.ca_maxrequests
            ),
            (4096, 8192, 100, 8, 2)
        );
    }

    /// The COMPOUND parts of [`MIN_REQUEST`] and [`MIN_RESPONSE`] are what the codec
    /// makes of SEQUENCE alone; the smallest sizes themselves are granted.
    #[test]
    fn the_smallest_channel_holds_a_sequence_alone() {
        use nfs4::compound::{Compound4Args, Compound4Res, NfsArgop4, NfsResop4};
        use nfs4::session::{Sequence4Args, Sequence4ResOk};
        use xdr::Encode;
        let args = Compound4Args {
            tag: Default::default(),
            minorversion: 1,
            argarray: vec![NfsArgop4::Sequence(Sequence4Args {
                sa_sessionid: [0; 16],
                sa_sequenceid: 1,
                sa_slotid: 0,
                sa_highest_slotid: 0,
                sa_cachethis: false,
            })],
        };
        let res = Compound4Res::new(
            Default::default(),
            vec![NfsResop4::Sequence(nfs4::Res4::Ok(Sequence4ResOk {
                sr_sessionid: [0; 16],
                sr_sequenceid: 1,
                sr_slotid: 0,
                sr_highest_slotid: 0,
                sr_target_highest_slotid: 0,
                sr_status_flags: 0,
            }))],
        );
        let len = |e: &dyn Fn(&mut xdr::Encoder)| {
            let mut enc = xdr::Encoder::new();
            e(&mut enc);
            enc.finish().xdr_len() as u32
        };
        assert_eq!(MIN_REQUEST - 40, len(&|e| args.encode(e)));
        assert_eq!(MIN_RESPONSE - 24, len(&|e| res.encode(e)));
        assert!(ChannelLimits::FORE
            .negotiate(&asked(MIN_REQUEST, MIN_RESPONSE, 0, 1, 1))
            .is_ok());
    }

    #[test]
    fn rfc8881_18_36_3_too_small_attributes_are_toosmall() {
        for a in [
            asked(MIN_REQUEST - 1, 8192, 0, 8, 2),
            asked(8192, MIN_RESPONSE - 1, 0, 8, 2),
            asked(8192, 8192, 0, 0, 2),
            asked(8192, 8192, 0, 8, 0),
        ] {
            assert_eq!(
                ChannelLimits::FORE.negotiate(&a),
                Err(NfsStat4::NFS4ERR_TOOSMALL)
            );
        }
    }
}

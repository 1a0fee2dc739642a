//! Connection setup: our configuration, the RFC 8797 private data we offer, and what
//! we learn from the peer's (Linux `verbs.c`, `rpcrdma_ep_create`).
//!
//! Specs: RFC 8797 §3-§4; rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3.2-§4.3.3
//! (inline thresholds, "senders MUST assume a receiver's inline threshold is 1024
//! bytes" without such a mechanism).

use std::time::Duration;

use bytes::Bytes;
use rdma::{ConnectParams, PeerParams, RecvWr};
use rpcrdma::private_data::{PeerLimits, PrivateData};
use rpcrdma::reassembly::ReassemblyOptions;
use rpcrdma::validate::Policy;

/// Transport settings, for either role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// Our inline send threshold (largest Send we post), advertised in private data.
    /// RFC 8797 can say only a multiple of 1024 from 1 KiB to 256 KiB (it encodes
    /// KiB - 1): another value is advertised rounded down to a whole KiB and clamped to
    /// that range, and that advertised value is the one in force
    /// ([`RdmaConfig::private_data`]).
    pub max_send: u32,
    /// Our inline receive threshold: the size of each posted receive buffer. Rounded
    /// and clamped as [`RdmaConfig::max_send`] is.
    pub max_recv: u32,
    /// Requester: credits asked for (and Receives posted). Responder: the most credits
    /// granted to a connection (and Receives posted). §4.3.1.
    pub credits: u32,
    /// Responder: credits granted to a new connection (at most
    /// [`RdmaConfig::credits`]), with that many Receive and Send buffers charged to
    /// [`RdmaConfig::max_memory`]. The grant doubles, up to `credits`, whenever more
    /// than half of it is in service and the budget has room for the buffers, and
    /// never shrinks (`rpcrdma::credits::grown_target`): an idle connection holds
    /// few buffers, a busy one gets the full grant (issue 16).
    pub initial_credits: u32,
    /// We accept Send With Invalidate (RFC 8797 R flag; requester).
    pub remote_invalidate: bool,
    /// Inbound RDMA Read depth we offer (the peer's ORD against us).
    pub ird: u16,
    /// Outbound RDMA Read depth we want (responder).
    pub ord: u16,
    /// Chunk list limits applied when parsing headers.
    pub limits: rpcrdma::Limits,
    /// Largest Call (responder) or Reply (requester) accepted, chunks included.
    pub max_message: u64,
    /// Responder: most bytes of RDMA Read sinks registered at once per connection
    /// (a single Call may still use up to `max_message`). With the receive buffers
    /// (`credits` × `max_recv`) this bounds a connection's memory.
    pub max_read_in_flight: u64,
    /// Responder: the memory budget of one [`crate::RdmaServer`], shared by all its
    /// connections ([`rpcrdma::memory::MemoryBudget`]; an upper layer may share it
    /// too, `RdmaServer::with_memory`). Charged to it: each connection's Receive and
    /// Send buffers from accept until it ends (a connection that does not fit, with
    /// [`RdmaConfig::max_message`] kept free for one whole Call, or that arrives
    /// while Calls wait for memory, is rejected), and the Read chunk
    /// data of each Call from the start of its RDMA Reads until its Reply is sent (a
    /// Call that would exceed it waits in line, holding its Receive, until memory is
    /// released; one larger than the whole budget is answered GARBAGE_ARGS). Nothing
    /// charged is ever allocated past it.
    pub max_memory: u64,
    /// Responder: a Call's RDMA Reads must complete within this time, else the
    /// connection is closed (§5.5.3: RDMA operational errors are fatal to the
    /// connection), which releases what the Call held. A peer that announces Read
    /// chunks and never answers the Reads holds memory no longer than this.
    pub read_timeout: Duration,
    /// Both roles: a connection with Calls outstanding or work requests posted that
    /// makes no progress (no completion, no Reply) for half this time logs a warning
    /// naming what it waits for; after this whole time one stuck on its own work
    /// requests (Sends, RDMA Reads, invalidations the provider never completed) is
    /// closed, so that the client reconnects and retransmits (issue 31, `liveness`).
    /// Zero: no watchdog. Default 60 s, a Linux client's default retransmit timeout
    /// (`timeo`).
    pub stall_timeout: Duration,
    /// Most bytes of idle data buffers (Read sinks; Write and Reply chunks) kept for
    /// reuse across calls and connections (`rdma::BufferPool`): buffers beyond it are
    /// freed when they come back.
    pub max_idle_buffers: usize,
    /// RPC-over-RDMA Version Two (rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00).
    /// Requester: open each connection with a Version Two Call (at most 1024 bytes,
    /// v2 §5), fall back to Version One on ERR_VERS and remember that for this server
    /// so a reconnect does not probe again (v2 §5.2). Responder: accept both versions
    /// and answer each Call in its own (v2 §5.3). Off: Version One only (a responder
    /// answers a Version Two message with ERR_VERS 1-1).
    pub version_two: bool,
    /// Responder-provided Read chunks ("reliable reply",
    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05), a Version Two optional feature
    /// advertised with RDMA_OPTIONAL `RELIABLE_REPLY` (docs/rpcrdma-v2.md). Needs
    /// [`RdmaConfig::version_two`] and a peer that agrees; Version One peers (Linux)
    /// never see it. Requester: advertise once Version Two is settled, then offer no
    /// Reply chunk and pull Replies sent in a Read chunk. Responder: accept the
    /// advertisement, and send a Reply that fits no requester-provided resource
    /// through a read-only region of its own. Off by default.
    pub reliable_reply: bool,
    /// Responder: how long a Reply stays exposed through a Read chunk without
    /// RDMA_DONE before it is invalidated (reliable-reply §4.1.3).
    pub pull_timeout: Duration,
    /// Backward-direction credits (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7.2):
    /// Requester: backward Calls it serves at once, with that many extra Receives
    /// posted per connection once a backward dispatcher is set
    /// ([`crate::RdmaTransport::serve_backward`]). Responder: backward Calls it sends
    /// at once, with that many extra Receives for their Replies. 0: no backward
    /// channel.
    pub backward_credits: u32,
    /// Fault injection for tests: a requester that never sends RDMA_DONE after pulling
    /// a Reply, so that the responder's pull timeout is exercised. Never set it in
    /// production.
    #[doc(hidden)]
    pub fault_skip_rdma_done: bool,
}

impl Default for RdmaConfig {
    /// 4 KiB both ways and 128 credits, as the Linux client offers
    /// (docs/linux-facts.md, "Seen from Linux (6.1)"); 16 MiB messages.
    fn default() -> Self {
        RdmaConfig {
            max_send: 4096,
            max_recv: 4096,
            credits: 128,
            initial_credits: 8,
            remote_invalidate: true,
            ird: 32,
            ord: 32,
            limits: rpcrdma::Limits::default(),
            max_message: 16 << 20,
            max_read_in_flight: 64 << 20,
            max_memory: 1 << 30,
            read_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(60),
            max_idle_buffers: 64 << 20,
            version_two: false,
            reliable_reply: false,
            pull_timeout: rpcrdma::pull::DEFAULT_PULL_TIMEOUT,
            backward_credits: 0,
            fault_skip_rdma_done: false,
        }
    }
}

impl RdmaConfig {
    /// The same inline threshold both ways.
    pub fn with_inline(inline: u32) -> Self {
        RdmaConfig {
            max_send: inline,
            max_recv: inline,
            ..RdmaConfig::default()
        }
    }

    /// Our RFC 8797 private data, with the sizes as it can state them
    /// ([`PrivateData::advertised`]: whole KiB, 1 KiB-256 KiB). Every limit we derive
    /// comes from these, never from the raw `max_send`/`max_recv`: the peer sizes its
    /// Receives from what we advertised, so `max_send: 5000` means at most 4096 bytes
    /// inline.
    pub fn private_data(&self) -> PrivateData {
        PrivateData {
            remote_invalidate: self.remote_invalidate,
            max_send: self.max_send,
            max_recv: self.max_recv,
        }
        .advertised()
    }

    /// This configuration on a device with `attributes`: remote invalidation is
    /// offered only where the device can invalidate (`DeviceAttributes::invalidate`).
    pub(crate) fn on_device(&self, attributes: &rdma::DeviceAttributes) -> RdmaConfig {
        RdmaConfig {
            remote_invalidate: self.remote_invalidate && attributes.invalidate,
            ..self.clone()
        }
    }

    /// What we offer at connection setup, with the Receives to post before the
    /// connection carries data.
    pub fn connect_params(&self, recvs: Vec<RecvWr>) -> ConnectParams {
        ConnectParams {
            private_data: Bytes::copy_from_slice(&self.private_data().emit()),
            ird: self.ird,
            ord: self.ord,
            recvs,
        }
    }

    /// The thresholds in force with a peer that offered `peer`, from our sizes as
    /// advertised ([`RdmaConfig::private_data`]). RFC 8797: absent or foreign private
    /// data means the Version One default of 1024 bytes each way. Our receive buffers
    /// are `RdmaConfig::recv_buffer_len` long whatever the peer says.
    pub fn negotiate(&self, peer: &PeerParams) -> PeerLimits {
        let theirs = PrivateData::parse(&peer.private_data);
        PeerLimits::negotiate(&self.private_data(), theirs.as_ref())
    }

    /// The header validation policy: Version One only, or One and Two with
    /// [`RdmaConfig::version_two`].
    pub(crate) fn policy(&self) -> Policy {
        let base = if self.version_two {
            Policy::default()
        } else {
            Policy::v1_only()
        };
        let mut options = base.options.clone();
        if self.reliable_reply_offered() {
            // v2 §3.1: the opttype we implement; any other stays ERR_INVAL_OPTION.
            options.push(rpcrdma::options::RELIABLE_REPLY);
        }
        Policy {
            limits: self.limits,
            options,
            ..base
        }
    }

    /// True when we take part in the reliable-reply exchange (it is a Version Two
    /// option, so it needs Version Two).
    pub(crate) fn reliable_reply_offered(&self) -> bool {
        self.version_two && self.reliable_reply
    }

    /// What we say in our `rpcrdma2_reliable_reply` (requester or responder): whether
    /// the peer may use Send With Invalidate on the reply Read chunk (responder) or
    /// whether we can send RDMA_DONE that way (requester). Follows
    /// [`RdmaConfig::remote_invalidate`].
    pub(crate) fn reliable_reply_info(&self) -> rpcrdma::options::ReliableReplyInfo {
        rpcrdma::options::ReliableReplyInfo {
            remote_invalidate: self.remote_invalidate,
        }
    }

    /// Reassembly options (responder).
    pub(crate) fn reassembly(&self) -> ReassemblyOptions {
        ReassemblyOptions {
            check_counts: true,
            max_len: self.max_message,
        }
    }

    /// Receive buffer length: our advertised receive threshold, rounded down to what
    /// RFC 8797 can say (so that we never accept less than we announced).
    pub(crate) fn recv_buffer_len(&self) -> usize {
        self.private_data().max_recv as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_private_data_means_1024_both_ways() {
        let cfg = RdmaConfig::with_inline(65536);
        let l = cfg.negotiate(&PeerParams::default());
        assert_eq!((l.send_threshold, l.recv_threshold), (1024, 1024));
        assert!(!l.remote_invalidate);
    }

    #[test]
    fn knfsd_private_data_gives_4k() {
        // Linux knfsd 6.1 (docs/linux-facts.md): flags 0x00, sizes 3/3.
        let peer = PeerParams {
            private_data: Bytes::from_static(&[0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3]),
            ..PeerParams::default()
        };
        let l = RdmaConfig::with_inline(65536).negotiate(&peer);
        assert_eq!((l.send_threshold, l.recv_threshold), (4096, 4096));
        assert!(!l.remote_invalidate);
    }

    /// A peer that advertises 256 KiB both ways, so that our own sizes decide.
    fn big_peer() -> PeerParams {
        PeerParams {
            private_data: Bytes::from_static(&[0xf6, 0xab, 0x0e, 0x18, 1, 1, 255, 255]),
            ..PeerParams::default()
        }
    }

    #[test]
    fn rfc8797_limits_come_from_sizes_as_advertised_not_multiples_of_1024() {
        let cfg = RdmaConfig {
            max_send: 5000,
            max_recv: 6000,
            ..RdmaConfig::default()
        };
        // 5000 -> 4 KiB (code 3), 6000 -> 5 KiB (code 4).
        let p = cfg.connect_params(Vec::new());
        assert_eq!(&p.private_data[6..], &[3, 4]);
        assert_eq!(
            (cfg.private_data().max_send, cfg.private_data().max_recv),
            (4096, 5120)
        );
        let l = cfg.negotiate(&big_peer());
        assert_eq!(l.send_threshold, 4096, "never more than 4096 inline");
        assert_eq!(l.recv_threshold, 5120);
        assert_eq!(cfg.recv_buffer_len(), 5120);
        // One byte short of a KiB multiple rounds down a whole KiB.
        let cfg = RdmaConfig::with_inline(4095);
        assert_eq!(&cfg.connect_params(Vec::new()).private_data[6..], &[2, 2]);
        let l = cfg.negotiate(&big_peer());
        assert_eq!((l.send_threshold, l.recv_threshold), (3072, 3072));
    }

    #[test]
    fn rfc8797_limits_above_256k_are_the_256k_advertised() {
        let cfg = RdmaConfig::with_inline(1 << 20);
        assert_eq!(
            &cfg.connect_params(Vec::new()).private_data[6..],
            &[255, 255]
        );
        let l = cfg.negotiate(&big_peer());
        assert_eq!((l.send_threshold, l.recv_threshold), (262_144, 262_144));
        assert_eq!(cfg.recv_buffer_len(), 262_144);
        // Below 1 KiB: 1 KiB is the least the private data can say.
        let cfg = RdmaConfig::with_inline(512);
        let l = cfg.negotiate(&big_peer());
        assert_eq!((l.send_threshold, l.recv_threshold), (1024, 1024));
        assert_eq!(cfg.recv_buffer_len(), 1024);
    }

    #[test]
    fn our_private_data_is_rfc8797() {
        let p = RdmaConfig::default().connect_params(Vec::new());
        assert_eq!(&p.private_data[..], &[0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3]);
    }
}

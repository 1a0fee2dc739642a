//! Protocol version negotiation (Version Two draft §5) and per-version defaults.
//!
//! Specs: rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §2.3, §5;
//! rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3.3, §5.5.1.
//!
//! Requester states (each consumed by value, rustls-style):
//!
//! ```text
//!   Unprobed --send first Call in v2 (<= 1024 bytes)--> Probing{xid}
//!   Probing --valid v2 Reply for xid----------------> Settled(2)   (4096 default)
//!   Probing --ERR_VERS [low, high] without 2--------> Settled(1)   (resend the Call in v1)
//!   Probing --connection lost-----------------------> next connection: Settled(1)
//!   new(v1) ----------------------------------------> Settled(1)
//! ```
//!
//! The responder has no state: it answers in the version of each Call (§5.3), and an
//! unsupported version with ERR_VERS and its range ([`crate::validate`]).

use crate::header::ErrorBody;
use crate::private_data::PeerLimits;
use crate::wire::{Version, Xid};

/// The default inline threshold of a version: v1 §4.3.3 "senders MUST assume a
/// receiver's inline threshold is 1024 bytes"; v2 §2.3 "senders MUST assume a
/// receiver's inline threshold is 4096 bytes".
pub const fn default_inline_threshold(v: Version) -> u32 {
    match v.0 {
        2 => 4096,
        _ => 1024,
    }
}

/// The largest Send a [`crate::Requester`] or [`crate::Responder`] builds on a
/// connection whose peer sent `peer` (its RFC 8797 private data, as negotiated; `None`
/// when it sent none) and on which versions up to `max_version` may be spoken: the
/// negotiated send threshold, else the default threshold of the highest version
/// (v1 §4.3.3: 1024; v2 §2.3: 4096), since without private data each message assumes
/// the default of its own version. Drivers size their send buffers with it, so this
/// rule is stated once, here, beside the thresholds the state machines use.
pub fn max_send_size(peer: Option<&PeerLimits>, max_version: Version) -> u32 {
    peer.map_or(default_inline_threshold(max_version), |p| p.send_threshold)
}

/// v2 draft §5: "this initial message can be no larger than the Version One default
/// inline threshold of 1024 bytes."
pub const PROBE_LIMIT: u32 = 1024;

/// The requester's negotiation state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiation {
    /// Version Two wanted, nothing sent yet.
    Unprobed,
    /// The first Call went out in Version Two; waiting for its answer.
    Probing {
        /// The probing Call's XID.
        xid: Xid,
    },
    /// The version for the rest of the connection.
    Settled(Version),
}

/// What the requester must do after the answer to its probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegotiationOutcome {
    /// Not an answer to the probe; nothing changes.
    Unrelated,
    /// The responder speaks this version; the probing Call completed normally.
    Settled(Version),
    /// The responder refused the version: send the Call `xid` again, in `version`.
    Retry {
        /// The Call to send again.
        xid: Xid,
        /// The version to use from now on.
        version: Version,
    },
    /// No common version: close the connection.
    NoCommonVersion,
}

impl Negotiation {
    /// Start of a connection: probe with Version Two, or settle on Version One.
    pub fn new(prefer: Version) -> Self {
        if prefer == Version::TWO {
            Negotiation::Unprobed
        } else {
            Negotiation::Settled(Version::ONE)
        }
    }

    /// The version to put in the next Call.
    pub fn version(&self) -> Version {
        match self {
            Negotiation::Unprobed | Negotiation::Probing { .. } => Version::TWO,
            Negotiation::Settled(v) => *v,
        }
    }

    /// The most a Send may carry now: 1024 while probing, else the version's default
    /// (the caller caps it with RFC 8797 private data when there was any).
    pub fn send_threshold(&self) -> u32 {
        match self {
            Negotiation::Unprobed | Negotiation::Probing { .. } => PROBE_LIMIT,
            Negotiation::Settled(v) => default_inline_threshold(*v),
        }
    }

    /// True while the first Call must be answered before another is sent. (Credits
    /// enforce the same through the initial single credit; v2 draft §5: "a requester
    /// MUST assume the ability to exchange only a single RPC-over-RDMA message at a
    /// time until it receives a non-error RPC-over-RDMA message".)
    pub fn is_probing(&self) -> bool {
        matches!(self, Negotiation::Probing { .. })
    }

    /// Records that Call `xid` was sent.
    pub fn on_send(self, xid: Xid) -> Self {
        match self {
            Negotiation::Unprobed => Negotiation::Probing { xid },
            other => other,
        }
    }

    /// Handles a received message for `xid`: `error` is its RDMA_ERROR body, if any.
    pub fn handle_reply(self, xid: Xid, error: Option<&ErrorBody>) -> (Self, NegotiationOutcome) {
        let Negotiation::Probing { xid: probe } = self else {
            return (self, NegotiationOutcome::Unrelated);
        };
        if xid != probe {
            return (self, NegotiationOutcome::Unrelated);
        }
        match error {
            // v2 §5.1: the responder "sends an RPC-over-RDMA message back to the
            // requester with the same XID containing a valid non-error response.
            // Subsequently, both peers use the default inline threshold value for
            // RPC-over-RDMA Version Two connections (4096 bytes)."
            None => (
                Negotiation::Settled(Version::TWO),
                NegotiationOutcome::Settled(Version::TWO),
            ),
            // v2 §5.2: "the requester selects a protocol version in the range of
            // responder-supported versions for subsequent messages".
            Some(ErrorBody::Vers { low, high }) => {
                let pick = if *low <= Version::TWO && Version::TWO <= *high {
                    Version::TWO
                } else if *low <= Version::ONE && Version::ONE <= *high {
                    Version::ONE
                } else {
                    return (self, NegotiationOutcome::NoCommonVersion);
                };
                (
                    Negotiation::Settled(pick),
                    NegotiationOutcome::Retry { xid, version: pick },
                )
            }
            // Any other error: the responder parsed a v2 header, so it speaks v2.
            Some(_) => (
                Negotiation::Settled(Version::TWO),
                NegotiationOutcome::Settled(Version::TWO),
            ),
        }
    }

    /// The state for the next connection to the same responder. v2 §5.2: a requester
    /// "can avoid a possible version negotiation loop ... by assuming that particular
    /// responder does not support RPC-over-RDMA Version Two", and "can assume the same
    /// situation ... if the initial negotiation message is lost or dropped."
    pub fn next_connection(self) -> Self {
        match self {
            Negotiation::Probing { .. } => Negotiation::Settled(Version::ONE),
            Negotiation::Settled(v) => Negotiation::Settled(v),
            Negotiation::Unprobed => Negotiation::Unprobed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_s2_3_default_thresholds() {
        assert_eq!(default_inline_threshold(Version::ONE), 1024);
        assert_eq!(default_inline_threshold(Version::TWO), 4096);
        // Unknown versions are refused before any Send is sized; they get v1's.
        assert_eq!(default_inline_threshold(Version(3)), 1024);
    }

    #[test]
    fn max_send_size_is_the_peers_threshold_else_the_highest_versions_default() {
        // v1 §4.3.3 / v2 §2.3: no private data, the default of the highest version.
        assert_eq!(max_send_size(None, Version::ONE), 1024);
        assert_eq!(max_send_size(None, Version::TWO), 4096);
        // RFC 8797: with private data, what was negotiated, whatever the version.
        let peer = PeerLimits {
            send_threshold: 2048,
            recv_threshold: 8192,
            remote_invalidate: false,
        };
        assert_eq!(max_send_size(Some(&peer), Version::ONE), 2048);
        assert_eq!(max_send_size(Some(&peer), Version::TWO), 2048);
    }

    #[test]
    fn v2_s5_probe_is_limited_to_1024_then_v2_uses_4096() {
        let n = Negotiation::new(Version::TWO);
        assert_eq!(n.version(), Version::TWO);
        assert_eq!(n.send_threshold(), 1024);
        let n = n.on_send(Xid(1));
        assert!(n.is_probing());
        assert_eq!(n.send_threshold(), 1024);
        let (n, out) = n.handle_reply(Xid(1), None);
        assert_eq!(out, NegotiationOutcome::Settled(Version::TWO));
        assert_eq!(n.send_threshold(), 4096);
        assert_eq!(n.version(), Version::TWO);
    }

    #[test]
    fn v2_s5_2_err_vers_falls_back_to_v1_and_resends() {
        let n = Negotiation::new(Version::TWO).on_send(Xid(7));
        let (n, out) = n.handle_reply(
            Xid(7),
            Some(&ErrorBody::Vers {
                low: Version::ONE,
                high: Version::ONE,
            }),
        );
        assert_eq!(
            out,
            NegotiationOutcome::Retry {
                xid: Xid(7),
                version: Version::ONE
            }
        );
        assert_eq!(n, Negotiation::Settled(Version::ONE));
        assert_eq!(n.send_threshold(), 1024);
    }

    #[test]
    fn no_common_version_closes() {
        let n = Negotiation::new(Version::TWO).on_send(Xid(7));
        let (_, out) = n.handle_reply(
            Xid(7),
            Some(&ErrorBody::Vers {
                low: Version(3),
                high: Version(4),
            }),
        );
        assert_eq!(out, NegotiationOutcome::NoCommonVersion);
    }

    #[test]
    fn unrelated_xid_does_not_settle() {
        let n = Negotiation::new(Version::TWO).on_send(Xid(7));
        assert_eq!(
            n.handle_reply(Xid(8), None),
            (n, NegotiationOutcome::Unrelated)
        );
    }

    #[test]
    fn v2_s5_2_lost_connection_while_probing_means_v1_next_time() {
        let n = Negotiation::new(Version::TWO).on_send(Xid(7));
        assert_eq!(n.next_connection(), Negotiation::Settled(Version::ONE));
    }

    #[test]
    fn v1_requester_never_probes() {
        let n = Negotiation::new(Version::ONE).on_send(Xid(1));
        assert_eq!(n, Negotiation::Settled(Version::ONE));
        assert_eq!(n.send_threshold(), 1024);
    }
}

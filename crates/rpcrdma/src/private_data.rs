//! RDMA-CM connection private data for RPC-over-RDMA Version One (RFC 8797).
//!
//! Specs: RFC 8797 (summarised in docs/linux-facts.md, "RFC 8797 private data");
//! rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3.3 (the 1024-byte default when no
//! such mechanism is used).
//!
//! ```text
//!  0                   1                   2                   3
//! +---------------------------------------------------------------+
//! |                 Format Identifier = 0xf6ab0e18                |
//! +---------------+-------------+-+---------------+---------------+
//! | Version = 1   |  Reserved   |R|   Send Size   | Receive Size  |
//! +---------------+-------------+-+---------------+---------------+
//! ```
//!
//! Sizes are encoded as `(bytes / 1024) - 1`: 0 is 1 KiB, 255 is 256 KiB. Private data
//! that is absent, too short, carries another format identifier or an unknown version
//! is "foreign": the peer's thresholds are then the 1024-byte default and it does not
//! accept remote invalidation.

/// RFC 8797 format identifier.
pub const MAGIC: u32 = 0xf6ab_0e18;
/// The only private data version RFC 8797 defines.
pub const VERSION: u8 = 1;
/// Bytes of encoded private data.
pub const LEN: usize = 8;
/// R flag: the sender accepts Send With Invalidate.
pub const FLAG_REMOTE_INVALIDATE: u8 = 0x01;
/// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3.3: "In the absense of such a
/// mechanism, senders MUST assume a receiver's inline threshold is 1024 bytes."
pub const DEFAULT_INLINE: u32 = 1024;
/// Largest encodable inline size: (255 + 1) * 1024.
pub const MAX_INLINE: u32 = 256 * 1024;

/// Decoded RPC-over-RDMA private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    /// The sender accepts Send With Invalidate (R flag).
    pub remote_invalidate: bool,
    /// The sender's inline send threshold in bytes (a multiple of 1024, 1 KiB-256 KiB).
    pub max_send: u32,
    /// The sender's inline receive threshold in bytes (a multiple of 1024).
    pub max_recv: u32,
}

/// Encodes a threshold in bytes as RFC 8797's size code, rounding down to a whole KiB
/// (announcing more than we have would be a lie) and clamping to 1 KiB-256 KiB.
pub fn encode_size(bytes: u32) -> u8 {
    let kib = (bytes / 1024).clamp(1, 256);
    (kib - 1) as u8
}

/// Decodes RFC 8797's size code to bytes.
pub fn decode_size(code: u8) -> u32 {
    (u32::from(code) + 1) * 1024
}

impl PrivateData {
    /// Parses the first 8 bytes of `buf`; `None` if the data is absent or foreign.
    /// Bytes after the first 8 are ignored (InfiniBand CM pads private data).
    pub fn parse(buf: &[u8]) -> Option<PrivateData> {
        let b: &[u8; LEN] = buf.get(..LEN)?.try_into().ok()?;
        if u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != MAGIC || b[4] != VERSION {
            return None;
        }
        Some(PrivateData {
            remote_invalidate: b[5] & FLAG_REMOTE_INVALIDATE != 0,
            max_send: decode_size(b[6]),
            max_recv: decode_size(b[7]),
        })
    }

    /// The thresholds as [`PrivateData::emit`] states them: each rounded down to a
    /// whole KiB and clamped to 1 KiB-256 KiB, the sizes RFC 8797 can express
    /// (docs/linux-facts.md, "RFC 8797 private data": "(bytes / 1024) - 1, so 0 means
    /// 1 KiB and 255 means 256 KiB"). The peer learns these, not our raw
    /// configuration, so the limits we derive must come from them too.
    pub fn advertised(&self) -> PrivateData {
        PrivateData {
            remote_invalidate: self.remote_invalidate,
            max_send: decode_size(encode_size(self.max_send)),
            max_recv: decode_size(encode_size(self.max_recv)),
        }
    }

    /// The 8-byte encoding. Reserved flag bits are zero.
    pub fn emit(&self) -> [u8; LEN] {
        let m = MAGIC.to_be_bytes();
        let flags = if self.remote_invalidate {
            FLAG_REMOTE_INVALIDATE
        } else {
            0
        };
        [
            m[0],
            m[1],
            m[2],
            m[3],
            VERSION,
            flags,
            encode_size(self.max_send),
            encode_size(self.max_recv),
        ]
    }
}

/// What one side learns from the peer's private data (or its absence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// Largest Send we may post to the peer (its receive threshold, capped by our send
    /// threshold).
    pub send_threshold: u32,
    /// Largest Send the peer may post to us.
    pub recv_threshold: u32,
    /// The peer accepts Send With Invalidate.
    pub remote_invalidate: bool,
}

impl PeerLimits {
    /// Combines our own advertised values with what the peer sent. Like Linux, each
    /// direction uses the minimum of the two sides; absent or foreign peer data means
    /// the 1024-byte default.
    ///
    /// `own` counts as sent ([`PrivateData::advertised`]): a configured send size of
    /// 5000 bytes goes out as 4 KiB, and the peer, which sized its Receives from that,
    /// must never get a Send of more than 4096 bytes from us; a receive size over
    /// 256 KiB goes out as 256 KiB, and the peer sends us no more than that.
    pub fn negotiate(own: &PrivateData, peer: Option<&PrivateData>) -> PeerLimits {
        let own = own.advertised();
        match peer {
            Some(p) => PeerLimits {
                send_threshold: own.max_send.min(p.max_recv),
                recv_threshold: own.max_recv.min(p.max_send),
                remote_invalidate: p.remote_invalidate,
            },
            None => PeerLimits {
                send_threshold: own.max_send.min(DEFAULT_INLINE),
                recv_threshold: own.max_recv.min(DEFAULT_INLINE),
                remote_invalidate: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From the Linux 6.1 client's MPA Request (vectors `mpa_request_kernel_client`,
    /// bytes 24..31): magic, version 1, flags 0x01, sizes 3/3.
    const LINUX_CLIENT: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
    /// From knfsd's MPA Reply (vectors `mpa_reply_knfsd`): flags 0x00.
    const LINUX_KNFSD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03];

    #[test]
    fn rfc8797_parses_linux_client_private_data() {
        let pd = PrivateData::parse(&LINUX_CLIENT).unwrap();
        assert_eq!(
            pd,
            PrivateData {
                remote_invalidate: true,
                max_send: 4096,
                max_recv: 4096
            }
        );
        assert_eq!(pd.emit(), LINUX_CLIENT);
    }

    #[test]
    fn rfc8797_parses_linux_knfsd_private_data() {
        let pd = PrivateData::parse(&LINUX_KNFSD).unwrap();
        assert!(!pd.remote_invalidate);
        assert_eq!((pd.max_send, pd.max_recv), (4096, 4096));
        assert_eq!(pd.emit(), LINUX_KNFSD);
    }

    #[test]
    fn rfc8797_size_encoding_is_kib_minus_one() {
        assert_eq!(encode_size(1024), 0);
        assert_eq!(encode_size(4096), 3);
        assert_eq!(encode_size(256 * 1024), 255);
        assert_eq!(decode_size(0), 1024);
        assert_eq!(decode_size(255), 262_144);
        // Round down, clamp.
        assert_eq!(encode_size(4095), 2);
        assert_eq!(encode_size(100), 0);
        assert_eq!(encode_size(u32::MAX), 255);
        for code in 0..=255u8 {
            assert_eq!(encode_size(decode_size(code)), code);
        }
    }

    #[test]
    fn rfc8797_r_flag_is_bit_zero_and_reserved_bits_ignored() {
        let mut b = LINUX_KNFSD;
        b[5] = 0xfe;
        assert!(!PrivateData::parse(&b).unwrap().remote_invalidate);
        b[5] = 0x01;
        assert!(PrivateData::parse(&b).unwrap().remote_invalidate);
    }

    #[test]
    fn rfc8797_absent_or_foreign_private_data_means_1024_default() {
        assert_eq!(PrivateData::parse(&[]), None);
        assert_eq!(PrivateData::parse(&LINUX_CLIENT[..7]), None);
        let mut foreign = LINUX_CLIENT;
        foreign[0] = 0;
        assert_eq!(PrivateData::parse(&foreign), None);
        let mut v2 = LINUX_CLIENT;
        v2[4] = 2;
        assert_eq!(PrivateData::parse(&v2), None);

        let own = PrivateData {
            remote_invalidate: true,
            max_send: 4096,
            max_recv: 4096,
        };
        assert_eq!(
            PeerLimits::negotiate(&own, None),
            PeerLimits {
                send_threshold: 1024,
                recv_threshold: 1024,
                remote_invalidate: false
            }
        );
    }

    #[test]
    fn rfc8797_trailing_bytes_are_ignored() {
        let mut padded = [0u8; 56];
        padded[..8].copy_from_slice(&LINUX_CLIENT);
        assert!(PrivateData::parse(&padded).is_some());
    }

    /// A peer that advertises the RFC 8797 maximum both ways, 256 KiB.
    const BIG_PEER: PrivateData = PrivateData {
        remote_invalidate: true,
        max_send: MAX_INLINE,
        max_recv: MAX_INLINE,
    };

    #[test]
    fn rfc8797_own_sizes_count_as_advertised_not_as_configured() {
        // Not multiples of 1024: rounded down, as emitted.
        let own = PrivateData {
            remote_invalidate: false,
            max_send: 5000,
            max_recv: 6143,
        };
        assert_eq!(own.emit()[6..], [3, 4]);
        assert_eq!(
            (own.advertised().max_send, own.advertised().max_recv),
            (4096, 5120)
        );
        let l = PeerLimits::negotiate(&own, Some(&BIG_PEER));
        assert_eq!((l.send_threshold, l.recv_threshold), (4096, 5120));
        // Above the 256 KiB maximum: clamped, as emitted.
        let own = PrivateData {
            remote_invalidate: false,
            max_send: 1 << 20,
            max_recv: u32::MAX,
        };
        assert_eq!(own.emit()[6..], [255, 255]);
        let l = PeerLimits::negotiate(&own, Some(&BIG_PEER));
        assert_eq!(
            (l.send_threshold, l.recv_threshold),
            (MAX_INLINE, MAX_INLINE)
        );
        // Below 1 KiB: the least RFC 8797 can say, 1 KiB, both with and without peer
        // private data.
        let own = PrivateData {
            remote_invalidate: false,
            max_send: 100,
            max_recv: 1023,
        };
        assert_eq!(own.emit()[6..], [0, 0]);
        let l = PeerLimits::negotiate(&own, Some(&BIG_PEER));
        assert_eq!((l.send_threshold, l.recv_threshold), (1024, 1024));
        let l = PeerLimits::negotiate(&own, None);
        assert_eq!((l.send_threshold, l.recv_threshold), (1024, 1024));
        // Whatever we configure, we derive what the peer decodes from our bytes.
        for (send, recv) in [(0, 0), (1025, 2047), (4096, 65537), (262_145, 9999)] {
            let own = PrivateData {
                remote_invalidate: true,
                max_send: send,
                max_recv: recv,
            };
            let decoded = PrivateData::parse(&own.emit()).unwrap();
            let l = PeerLimits::negotiate(&own, Some(&BIG_PEER));
            assert_eq!(l.send_threshold, decoded.max_send, "send {send}");
            assert_eq!(l.recv_threshold, decoded.max_recv, "recv {recv}");
        }
    }

    #[test]
    fn negotiate_takes_minimum_per_direction() {
        let own = PrivateData {
            remote_invalidate: false,
            max_send: 8192,
            max_recv: 2048,
        };
        let peer = PrivateData::parse(&LINUX_CLIENT).unwrap();
        assert_eq!(
            PeerLimits::negotiate(&own, Some(&peer)),
            PeerLimits {
                send_threshold: 4096,
                recv_threshold: 2048,
                remote_invalidate: true
            }
        );
    }
}

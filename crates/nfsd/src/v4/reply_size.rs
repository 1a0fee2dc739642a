//! The session's reply limits (RFC 8881 §2.10.6.4, §18.46.3, §15.1.3.3-4): a
//! COMPOUND's reply may not exceed the fore channel's `ca_maxresponsesize`
//! (NFS4ERR_REP_TOO_BIG), nor, when the client asked for it to be cached
//! (`sa_cachethis`), `ca_maxresponsesize_cached` (NFS4ERR_REP_TOO_BIG_TO_CACHE).
//!
//! Checked before each operation runs, from what its result may take at most
//! ([`estimate`]), as knfsd checks (`nfsd4_check_resp_size`), so that an operation
//! that changes something is refused rather than done and then reported as failed.
//! READ and READDIR are not refused when some of what they ask for fits: their
//! `count` / `maxcount` is lowered to the room left ([`fit`]), as §18.22.3 and
//! §18.23.3 let the server return less.

use nfs4::compound::NfsArgop4;
use nfs4::NfsStat4;

/// Bytes a reply takes before the results: the RPC reply header with an AUTH_NONE
/// or AUTH_SYS short verifier, COMPOUND4res's status, tag length and result count,
/// and SEQUENCE's result. The tag comes on top.
pub(super) const HEAD: usize = 128;

/// What the result of `op` may take at most, its status included.
pub(super) fn estimate(op: &NfsArgop4) -> usize {
    match op {
        NfsArgop4::Read(a) => 16 + a.count as usize,
        NfsArgop4::ReadDir(a) => 16 + a.maxcount as usize,
        // A link's text is at most PATH_MAX.
        NfsArgop4::ReadLink => 16 + 4096,
        NfsArgop4::GetAttr(_) => 1024,
        // LOCK4denied holds the other owner (up to NFS4_OPAQUE_LIMIT).
        NfsArgop4::Lock(_) | NfsArgop4::LockT(_) => 64 + nfs4::NFS4_OPAQUE_LIMIT as usize,
        _ => 256,
    }
}

/// The room a reply of `used` bytes has left under `limit`.
fn room(limit: usize, used: usize) -> usize {
    limit.saturating_sub(used)
}

/// `op` made to fit the room left (READ's `count`, READDIR's `maxcount` lowered),
/// or the error when it cannot: NFS4ERR_REP_TOO_BIG past `max`, or with `cached`
/// (the limit of a reply to cache) NFS4ERR_REP_TOO_BIG_TO_CACHE past it. `None`
/// when `op` fits as it is.
pub(super) fn fit(
    op: &NfsArgop4,
    used: usize,
    max: usize,
    cached: Option<usize>,
) -> Result<Option<NfsArgop4>, NfsStat4> {
    let need = estimate(op);
    let limit = cached.map_or(max, |c| c.min(max));
    if used + need <= limit {
        return Ok(None);
    }
    let left = room(limit, used + 16);
    match op {
        NfsArgop4::Read(a) if left > 0 => Ok(Some(NfsArgop4::Read(nfs4::io::Read4Args {
            count: left as u32,
            ..*a
        }))),
        // READDIR's smallest useful reply holds one entry; too small is its own
        // NFS4ERR_TOOSMALL, which READDIR answers.
        NfsArgop4::ReadDir(a) if left > 0 => {
            let mut a = a.clone();
            a.maxcount = left as u32;
            a.dircount = a.dircount.min(a.maxcount);
            Ok(Some(NfsArgop4::ReadDir(a)))
        }
        _ if used + need > max => Err(NfsStat4::NFS4ERR_REP_TOO_BIG),
        _ => Err(NfsStat4::NFS4ERR_REP_TOO_BIG_TO_CACHE),
    }
}

#[cfg(test)]
mod tests {
    use nfs4::io::Read4Args;
    use nfs4::StateId4;

    use super::*;

    fn read(count: u32) -> NfsArgop4 {
        NfsArgop4::Read(Read4Args {
            stateid: StateId4::ANONYMOUS,
            offset: 0,
            count,
        })
    }

    #[test]
    fn rfc8881_2_10_6_4_small_results_fit_and_big_ones_are_refused_before_they_run() {
        assert_eq!(fit(&NfsArgop4::GetFh, 128, 4096, None), Ok(None));
        assert_eq!(
            fit(&NfsArgop4::GetFh, 4000, 4096, None),
            Err(NfsStat4::NFS4ERR_REP_TOO_BIG)
        );
        // Cached: the smaller limit, and its own error.
        assert_eq!(
            fit(&NfsArgop4::ReadLink, 128, 65536, Some(1024)),
            Err(NfsStat4::NFS4ERR_REP_TOO_BIG_TO_CACHE)
        );
        assert_eq!(
            fit(&NfsArgop4::ReadLink, 128, 1024, Some(8192)),
            Err(NfsStat4::NFS4ERR_REP_TOO_BIG)
        );
    }

    #[test]
    fn rfc8881_18_22_3_a_read_is_shortened_to_the_room_left() {
        assert_eq!(fit(&read(1000), 128, 4096, None), Ok(None));
        let Ok(Some(NfsArgop4::Read(a))) = fit(&read(1 << 20), 128, 65536, None) else {
            panic!("shortened")
        };
        assert_eq!(a.count as usize, 65536 - 128 - 16);
        assert_eq!(
            fit(&read(100), 65536, 65536, None),
            Err(NfsStat4::NFS4ERR_REP_TOO_BIG)
        );
    }
}

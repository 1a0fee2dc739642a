//! NFSv3 statuses of the shared file layer as NFSv4 statuses (RFC 8881 §15.1).
//!
//! The file layer ([`crate::vfs`], `proc`) answers in `nfsstat3`; the
//! NFSv4.1 operations that reuse it translate here, in one place. Most values are the
//! same numbers in both versions (RFC 8881 §15.1 kept NFSv3's); the others:
//!
//! | NFSv3 | NFSv4 | why |
//! |---|---|---|
//! | NFS3ERR_ACCES | NFS4ERR_ACCESS | renamed, same number |
//! | NFS3ERR_JUKEBOX | NFS4ERR_DELAY | renamed, same number |
//! | NFS3ERR_NODEV | NFS4ERR_NXIO | NFSv4 has no NODEV (knfsd maps ENODEV so) |
//! | NFS3ERR_REMOTE | NFS4ERR_STALE | no NFSv4 equivalent; not produced by our file layer |
//! | NFS3ERR_NOT_SYNC | NFS4ERR_NOT_SAME | SETATTR's guard, NFSv4's VERIFY-style mismatch |
//! | anything else | NFS4ERR_SERVERFAULT | |

use nfs3::NfsStat3;
use nfs4::NfsStat4;

/// The NFSv4 status for an NFSv3 one of the shared file layer (module docs).
pub fn stat4(s: NfsStat3) -> NfsStat4 {
    match s {
        NfsStat3::NFS3_OK => NfsStat4::NFS4_OK,
        NfsStat3::NFS3ERR_NODEV => NfsStat4::NFS4ERR_NXIO,
        NfsStat3::NFS3ERR_REMOTE => NfsStat4::NFS4ERR_STALE,
        NfsStat3::NFS3ERR_NOT_SYNC => NfsStat4::NFS4ERR_NOT_SAME,
        NfsStat3::NFS3ERR_PERM
        | NfsStat3::NFS3ERR_NOENT
        | NfsStat3::NFS3ERR_IO
        | NfsStat3::NFS3ERR_NXIO
        | NfsStat3::NFS3ERR_ACCES
        | NfsStat3::NFS3ERR_EXIST
        | NfsStat3::NFS3ERR_XDEV
        | NfsStat3::NFS3ERR_NOTDIR
        | NfsStat3::NFS3ERR_ISDIR
        | NfsStat3::NFS3ERR_INVAL
        | NfsStat3::NFS3ERR_FBIG
        | NfsStat3::NFS3ERR_NOSPC
        | NfsStat3::NFS3ERR_ROFS
        | NfsStat3::NFS3ERR_MLINK
        | NfsStat3::NFS3ERR_NAMETOOLONG
        | NfsStat3::NFS3ERR_NOTEMPTY
        | NfsStat3::NFS3ERR_DQUOT
        | NfsStat3::NFS3ERR_STALE
        | NfsStat3::NFS3ERR_BADHANDLE
        | NfsStat3::NFS3ERR_BAD_COOKIE
        | NfsStat3::NFS3ERR_NOTSUPP
        | NfsStat3::NFS3ERR_TOOSMALL
        | NfsStat3::NFS3ERR_SERVERFAULT
        | NfsStat3::NFS3ERR_BADTYPE
        | NfsStat3::NFS3ERR_JUKEBOX => NfsStat4(s.0),
        _ => NfsStat4::NFS4ERR_SERVERFAULT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8881_15_1_same_numbers_carry_over_and_the_others_are_mapped() {
        assert_eq!(stat4(NfsStat3::NFS3ERR_ACCES), NfsStat4::NFS4ERR_ACCESS);
        assert_eq!(stat4(NfsStat3::NFS3ERR_JUKEBOX), NfsStat4::NFS4ERR_DELAY);
        assert_eq!(stat4(NfsStat3::NFS3ERR_STALE), NfsStat4::NFS4ERR_STALE);
        assert_eq!(
            stat4(NfsStat3::NFS3ERR_BADHANDLE),
            NfsStat4::NFS4ERR_BADHANDLE
        );
        assert_eq!(stat4(NfsStat3::NFS3ERR_NODEV), NfsStat4::NFS4ERR_NXIO);
        assert_eq!(stat4(NfsStat3(12345)), NfsStat4::NFS4ERR_SERVERFAULT);
        // Every number passed through is one NFSv4 names.
        for s in 0..=10010u32 {
            let v4 = stat4(NfsStat3(s));
            assert!(v4.name().is_some(), "{s} -> {v4:?}");
        }
    }
}

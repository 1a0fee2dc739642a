//! The one table from file-system errors (`errno`) to `nfsstat3` (RFC 1813 §2.6).
//!
//! Follows Linux knfsd's `nfserrno()` (fs/nfsd/nfsproc.c) where RFC 1813 leaves the
//! choice open; errors the table does not name become NFS3ERR_IO, as there.

use nfs3::NfsStat3;
use rustix::io::Errno;

/// Maps one `errno` to the status RFC 1813 §2.6 defines for it.
pub fn nfsstat3_from_errno(e: Errno) -> NfsStat3 {
    match e {
        Errno::PERM => NfsStat3::NFS3ERR_PERM,
        Errno::NOENT => NfsStat3::NFS3ERR_NOENT,
        Errno::IO | Errno::TXTBSY | Errno::REMOTEIO | Errno::UCLEAN | Errno::BADMSG => {
            NfsStat3::NFS3ERR_IO
        }
        Errno::NXIO => NfsStat3::NFS3ERR_NXIO,
        Errno::ACCESS => NfsStat3::NFS3ERR_ACCES,
        Errno::EXIST => NfsStat3::NFS3ERR_EXIST,
        Errno::XDEV => NfsStat3::NFS3ERR_XDEV,
        Errno::NODEV => NfsStat3::NFS3ERR_NODEV,
        Errno::NOTDIR => NfsStat3::NFS3ERR_NOTDIR,
        Errno::ISDIR => NfsStat3::NFS3ERR_ISDIR,
        Errno::INVAL => NfsStat3::NFS3ERR_INVAL,
        // O_NOFOLLOW met a symbolic link where the procedure needs another type
        // (RFC 1813 §3.3.6: READ of a non-regular file is NFS3ERR_INVAL).
        Errno::LOOP => NfsStat3::NFS3ERR_INVAL,
        Errno::FBIG | Errno::TOOBIG | Errno::OVERFLOW => NfsStat3::NFS3ERR_FBIG,
        Errno::NOSPC => NfsStat3::NFS3ERR_NOSPC,
        Errno::ROFS => NfsStat3::NFS3ERR_ROFS,
        Errno::MLINK => NfsStat3::NFS3ERR_MLINK,
        Errno::NAMETOOLONG => NfsStat3::NFS3ERR_NAMETOOLONG,
        Errno::NOTEMPTY => NfsStat3::NFS3ERR_NOTEMPTY,
        Errno::DQUOT => NfsStat3::NFS3ERR_DQUOT,
        Errno::STALE | Errno::BADF => NfsStat3::NFS3ERR_STALE,
        Errno::REMOTE => NfsStat3::NFS3ERR_REMOTE,
        Errno::NOTSUP => NfsStat3::NFS3ERR_NOTSUPP,
        // Transient: RFC 1813 §2.6 NFS3ERR_JUKEBOX, "the client should retry later".
        Errno::AGAIN | Errno::NOMEM | Errno::TIMEDOUT | Errno::INTR => NfsStat3::NFS3ERR_JUKEBOX,
        Errno::NFILE | Errno::MFILE => NfsStat3::NFS3ERR_SERVERFAULT,
        Errno::NOKEY => NfsStat3::NFS3ERR_PERM,
        _ => NfsStat3::NFS3ERR_IO,
    }
}

/// `?`-friendly conversion for results of file-system calls.
pub(crate) trait OrStat<T> {
    /// Maps the error through [`nfsstat3_from_errno`].
    fn or_stat(self) -> Result<T, NfsStat3>;
}

impl<T> OrStat<T> for rustix::io::Result<T> {
    fn or_stat(self) -> Result<T, NfsStat3> {
        self.map_err(nfsstat3_from_errno)
    }
}

/// A `std::io::Error` maps by its errno; one without (an early end of data) is
/// NFS3ERR_IO.
impl<T> OrStat<T> for std::io::Result<T> {
    fn or_stat(self) -> Result<T, NfsStat3> {
        self.map_err(|e| match e.raw_os_error() {
            Some(code) => nfsstat3_from_errno(rustix::io::Errno::from_raw_os_error(code)),
            None => NfsStat3::NFS3ERR_IO,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every errno RFC 1813 §2.6 names next to an nfsstat3 maps to that status.
    #[test]
    fn rfc1813_named_errnos_map_to_their_status() {
        let table = [
            (Errno::PERM, NfsStat3::NFS3ERR_PERM, 1i32),
            (Errno::NOENT, NfsStat3::NFS3ERR_NOENT, 2),
            (Errno::IO, NfsStat3::NFS3ERR_IO, 5),
            (Errno::NXIO, NfsStat3::NFS3ERR_NXIO, 6),
            (Errno::ACCESS, NfsStat3::NFS3ERR_ACCES, 13),
            (Errno::EXIST, NfsStat3::NFS3ERR_EXIST, 17),
            (Errno::XDEV, NfsStat3::NFS3ERR_XDEV, 18),
            (Errno::NODEV, NfsStat3::NFS3ERR_NODEV, 19),
            (Errno::NOTDIR, NfsStat3::NFS3ERR_NOTDIR, 20),
            (Errno::ISDIR, NfsStat3::NFS3ERR_ISDIR, 21),
            (Errno::INVAL, NfsStat3::NFS3ERR_INVAL, 22),
            (Errno::FBIG, NfsStat3::NFS3ERR_FBIG, 27),
            (Errno::NOSPC, NfsStat3::NFS3ERR_NOSPC, 28),
            (Errno::ROFS, NfsStat3::NFS3ERR_ROFS, 30),
            (Errno::MLINK, NfsStat3::NFS3ERR_MLINK, 31),
            (Errno::NAMETOOLONG, NfsStat3::NFS3ERR_NAMETOOLONG, 63),
            (Errno::NOTEMPTY, NfsStat3::NFS3ERR_NOTEMPTY, 66),
            (Errno::DQUOT, NfsStat3::NFS3ERR_DQUOT, 69),
            (Errno::STALE, NfsStat3::NFS3ERR_STALE, 70),
            (Errno::REMOTE, NfsStat3::NFS3ERR_REMOTE, 71),
        ];
        for (errno, status, value) in table {
            assert_eq!(nfsstat3_from_errno(errno), status, "{errno:?}");
            assert_eq!(status.0 as i32, value);
            // RFC 1813 took these values from (SunOS) errno; Linux agrees up to 31
            // only (ENAMETOOLONG is 36 on Linux, 63 on the wire), hence this table.
            if value <= 31 {
                assert_eq!(errno.raw_os_error(), value);
            }
        }
    }

    #[test]
    fn transient_errors_are_jukebox_and_unknown_ones_io() {
        assert_eq!(nfsstat3_from_errno(Errno::AGAIN), NfsStat3::NFS3ERR_JUKEBOX);
        assert_eq!(nfsstat3_from_errno(Errno::NOMEM), NfsStat3::NFS3ERR_JUKEBOX);
        assert_eq!(
            nfsstat3_from_errno(Errno::NOTSUP),
            NfsStat3::NFS3ERR_NOTSUPP
        );
        assert_eq!(nfsstat3_from_errno(Errno::LOOP), NfsStat3::NFS3ERR_INVAL);
        assert_eq!(
            nfsstat3_from_errno(Errno::MFILE),
            NfsStat3::NFS3ERR_SERVERFAULT
        );
        assert_eq!(nfsstat3_from_errno(Errno::PIPE), NfsStat3::NFS3ERR_IO);
    }
}

//! The client's one error type.
//!
//! Scope: every variant fails the one operation that returned it; none of them closes
//! the connection (the `oncrpc` client reconnects on its own when the transport
//! breaks). An NFS failure keeps the procedure and its `nfsstat3`, a MOUNT failure its
//! `mountstat3`, so callers match on the wire answer, never on text.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use nfs3::mount::MountStat3;
use nfs3::{NfsProc3, NfsStat3};
use oncrpc::ClientError;
use xdr::XdrError;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered an NFSv3 procedure with a status other than NFS3_OK
    /// (RFC 1813 §2.6 `nfsstat3`).
    #[error("NFS {}: {status:?}", proc_name(*.proc))]
    Nfs {
        /// The procedure that failed.
        proc: NfsProc3,
        /// The server's status. Invariant: not `NFS3_OK`.
        status: NfsStat3,
    },
    /// MNT refused the export path (RFC 1813 Appendix I `mountstat3`).
    #[error("MOUNT: {0:?}")]
    Mount(MountStat3),
    /// The RPC layer failed: timeout, rejected call, PROG_UNAVAIL, GARBAGE_ARGS, ...
    #[error("RPC {what}: {source}")]
    Rpc {
        /// The program and procedure called, as "NFS READ", "MOUNT MNT", ...
        what: &'static str,
        /// The RPC client's error.
        source: ClientError,
    },
    /// A reply's results do not decode as the procedure's result type.
    #[error("malformed reply to {what}: {source}")]
    Decode {
        /// The program and procedure called.
        what: &'static str,
        /// The XDR error.
        source: XdrError,
    },
    /// The server broke a rule of RFC 1813 that the client relies on.
    #[error("server broke the protocol: {0}")]
    Protocol(ProtocolViolation),
    /// Data written UNSTABLE could not be committed under one write verifier, even
    /// after re-sending it (RFC 1813 §3.3.7, §3.3.21) `attempts` times.
    #[error("write verifier changed on every COMMIT ({attempts} attempts)")]
    VerifierUnstable {
        /// COMMITs tried.
        attempts: u32,
    },
    /// A program is not registered with the server's portmapper (RFC 1833 §3.2:
    /// PMAPPROC_GETPORT returned port 0).
    #[error("program {prog} version {vers} is not registered with the portmapper")]
    NotRegistered {
        /// Program number.
        prog: u32,
        /// Version number.
        vers: u32,
    },
    /// Nothing accepts connections at the server's portmapper address (RFC 1833 §3:
    /// port 111): the server runs no rpcbind, so MOUNT's port cannot be looked up.
    /// Reported as soon as the connection is refused, not after the call timeout.
    #[error("no portmapper at {addr}: {source}")]
    NoPortmapper {
        /// Where the portmapper was asked.
        addr: SocketAddr,
        /// The connection error (e.g. connection refused).
        source: Arc<io::Error>,
    },
    /// An argument the client cannot send: a path with an empty or over-long
    /// component, a WRITE of 4 GiB or more, ...
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A local I/O error (resolving the server's address, a local file).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A rule of RFC 1813 a server broke, for [`Error::Protocol`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolViolation {
    /// CREATE, MKDIR or SYMLINK succeeded without returning the new handle, and the
    /// follow-up LOOKUP is what the caller must do (the client does it for them in
    /// the path helpers).
    #[error("no file handle for the new object")]
    MissingHandle,
    /// READ returned no data and no EOF, so reading could never progress.
    #[error("READ returned 0 bytes before end of file")]
    EmptyRead,
    /// WRITE reported 0 bytes written, so writing could never progress.
    #[error("WRITE wrote 0 bytes")]
    EmptyWrite,
    /// READ returned more bytes than asked for, or a `count` that is not the length
    /// of its data (RFC 1813 §3.3.6).
    #[error("READ returned an inconsistent count")]
    ReadCount,
    /// WRITE claims more bytes written than sent (RFC 1813 §3.3.7).
    #[error("WRITE count exceeds the data sent")]
    WriteCount,
    /// FSINFO advertised a zero `rtmax` or `wtmax`.
    #[error("FSINFO advertised a zero transfer size")]
    ZeroTransferSize,
    /// READDIR or READDIRPLUS returned no entry and no EOF, so listing could never
    /// progress.
    #[error("READDIR returned no entries before the end of the directory")]
    EmptyReaddir,
    /// The portmapper answered with a port number above 65535.
    #[error("portmapper returned an impossible port")]
    BadPort,
}

impl Error {
    /// The NFSv3 status, when the server answered with one.
    pub fn status(&self) -> Option<NfsStat3> {
        match self {
            Error::Nfs { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether this is an NFSv3 failure with `status`.
    pub fn is(&self, status: NfsStat3) -> bool {
        self.status() == Some(status)
    }
}

fn proc_name(p: NfsProc3) -> &'static str {
    p.name().unwrap_or("(unknown procedure)")
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_kept_and_displayed_with_the_procedure() {
        let e = Error::Nfs {
            proc: NfsProc3::LOOKUP,
            status: NfsStat3::NFS3ERR_NOENT,
        };
        assert!(e.is(NfsStat3::NFS3ERR_NOENT));
        assert_eq!(e.status(), Some(NfsStat3::NFS3ERR_NOENT));
        assert_eq!(e.to_string(), "NFS LOOKUP: NFS3ERR_NOENT");
        let m = Error::Mount(MountStat3::MNT3ERR_ACCES);
        assert_eq!(m.status(), None);
        assert_eq!(m.to_string(), "MOUNT: MNT3ERR_ACCES");
    }
}

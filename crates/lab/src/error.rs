//! Errors of the lab itself (as opposed to a scenario failing, which is an
//! [`crate::Outcome`] with a [`crate::Failure`]).

use std::path::PathBuf;

/// Why the lab could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// `lab/setup` has not run (or did not finish): there is no guest to boot.
    #[error(
        "the kernel lab is not set up: {0}\n\
         run `lab/setup` (as root; installs packages, downloads the pinned kernel, \
         builds siw and the initramfs), or run the lab suite with `lab/test`"
    )]
    NotSetUp(String),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What the lab was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The guest did not reach its init and mount the share, on every attempt.
    #[error("guest failed to boot after {attempts} attempt(s); qemu log and console tail:\n{console_tail}")]
    BootFailed {
        /// How many boots were tried.
        attempts: u32,
        /// qemu's log and the end of the last attempt's serial console.
        console_tail: String,
    },
    /// A wait for a guest handshake file ran out of time.
    #[error("timed out after {secs} s waiting for the guest to create {file}")]
    WaitTimeout {
        /// The share-relative file waited for.
        file: String,
        /// How long the wait was.
        secs: u64,
    },
    /// The guest powered off while the host was still waiting on it.
    #[error("guest exited while the host waited for {0}")]
    GuestGone(String),
    /// A scenario script or binary named by the test does not exist.
    #[error("not found: {0}")]
    NotFound(PathBuf),
    /// tshark could not be run or its output not understood.
    #[error("tshark: {0}")]
    Tshark(String),
}

impl LabError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        LabError::Io {
            what: what.into(),
            source,
        }
    }
}

//! The kernel interop lab: a real Linux kernel as the project's reference peer.
//!
//! This machine's kernel has no RDMA; a Debian 6.1 kernel booted under qemu
//! (TCG, no KVM needed) does: soft-iWARP (siw, built out of tree by
//! `lab/setup`), the NFS/RDMA client (xprtrdma) and knfsd's RDMA listener
//! (svcrdma). None of that code is ours, which is what makes it a referee.
//!
//! A scenario is a shell script run inside the guest (see `lab/guest/lib.sh`
//! for its step/record helpers) plus, optionally, host-side work done while
//! the guest holds: our server listening on the host, our client connecting
//! through a `hostfwd` port. The library boots the guest with the script on a
//! 9p share, enforces timeouts, powers the guest off, and turns the guest's
//! step records into an [`Outcome`] whose failure names the failing step and
//! carries the guest's dmesg and server logs.
//!
//! ```no_run
//! use lab::{GuestScript, Lab};
//! let lab = Lab::open().expect("run lab/setup first");
//! let outcome = lab
//!     .guest(GuestScript::scenario("knfsd-loopback").unwrap())
//!     .run()
//!     .unwrap();
//! outcome.assert_passed();
//! ```
//!
//! Setup problems are errors, never skips: a lab test that cannot boot its
//! guest fails and says why.

mod error;
mod host;
mod outcome;
mod paths;
pub mod prometheus;
mod qemu;
mod qmp;
pub mod realign;
mod run;
mod script;
pub mod tshark;
mod wire_watch;
pub mod workspace;

pub use error::LabError;
pub use host::{HostExit, HostProcess};
pub use outcome::{Failure, Outcome, StepResult, StepStatus};
pub use paths::Lab;
pub use qemu::{GuestConfig, PortForward, CPUS, MEMORY_MIB};
pub use run::{GuestPair, RunningGuest};
pub use script::GuestScript;

/// Well-known ports of the lab's network layout (qemu user networking).
pub mod ports {
    /// NFS/RDMA service port (RFC 8267); knfsd's RDMA listener in the guest.
    pub const NFS_RDMA: u16 = 20049;
    /// rpc.mountd's fixed port in the guest (MOUNT over TCP for NFSv3).
    pub const MOUNTD: u16 = 20048;
    /// Where a host-side server under test listens for the guest's client:
    /// 20049 on the host is taken by the hostfwd to the guest's knfsd.
    pub const HOST_SERVER_RDMA: u16 = 30049;
}

/// Addresses as seen from inside the guest.
pub mod addrs {
    /// The guest's own address; use it, not 127.0.0.1, for NFS/RDMA inside
    /// the guest (xprtrdma to a loopback address fails with EINVAL).
    pub const GUEST: &str = "10.0.2.15";
    /// The host's 127.0.0.1 as the guest reaches it through slirp.
    pub const HOST_FROM_GUEST: &str = "10.0.2.2";
}

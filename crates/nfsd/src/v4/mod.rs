//! NFSv4.1 (RFC 8881; XDR of RFC 5662 in the `nfs4` crate) beside NFSv3.
//!
//! - [`state`]: clients, sessions, slots and leases, a sans-IO state machine.
//!
//! Not served yet: program 100003 version 4 still answers PROG_MISMATCH.

pub mod state;

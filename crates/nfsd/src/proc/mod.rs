//! The NFSv3 procedures, one module per group (RFC 1813 §3.3).
//!
//! Each procedure takes its decoded arguments and returns its result; every failure
//! is an `nfsstat3` in the result, never a panic and never an RPC-level error.

pub(crate) mod attr;
pub(crate) mod fsinfo;
pub(crate) mod io;
pub(crate) mod names;
pub(crate) mod readdir;

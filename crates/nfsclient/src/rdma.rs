//! The NFSv3 Upper Layer Binding for RPC-over-RDMA (RFC 8267), as the client uses it.
//!
//! One binding serves both roles and lives in `nfs3` (feature `rdma`); see
//! [`nfs3::rdma`] for what it offers a requester: a Write chunk for READ data only (as
//! Linux xprtrdma), Reply chunks sized from the READ/READDIR counts, and where placed
//! READ data goes back into the reply stream.

pub use nfs3::rdma::Nfs3Binding as Nfs3RdmaBinding;

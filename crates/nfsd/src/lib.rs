//! An NFS version 3 server (RFC 1813) with MOUNT version 3, serving local directories,
//! and NFS version 4.1 (RFC 8881, [`v4`]) beside it
//! ([`server::Bound::serve_nfs4_recoverable`]; the binary serves it unless `--no-nfs4`).
//!
//! ```text
//!   TCP (record marking)        RPC-over-RDMA (rdma: NFS only)
//!            \                    /
//!        oncrpc::Dispatcher  (call bytes -> reply XdrStream)
//!            /                    \                  \
//!   service::NfsService      mount::MountService   v4::Nfs4Service (COMPOUND,
//!            |                    |                  sessions, pseudo root)
//!   nfs::NfsServer  -- proc/* (one module per group of procedures) <- v4 reuses them
//!            |
//!   vfs (export-confined openat/O_NOFOLLOW access, handle resolution)
//!   fh (handle format)   handle_key (its MAC key)   kernel_fh (open_by_handle_at)
//!   errno (errno -> nfsstat3)   creds (AUTH_SYS identities)
//!   exports (exports(5) table; the access check of every MNT and every handle)
//!
//!   nlm: NLM v4 (locks, blocked locks, GRANTED callbacks, shares) and NSM
//!   (SM_NOTIFY both ways, grace period), programs 100021 and 100024
//! ```
//!
//! A duplicate request cache ([`oncrpc::drc`], sized and charged by [`drc`]) sits in
//! every dispatcher of NFS and NLM, TCP and RDMA alike: a retransmitted REMOVE,
//! RENAME, WRITE, UNLOCK, ... gets the first call's reply instead of running again
//! (`--drc-entries`).
//!
//! The NFS and MOUNT programs are transport-neutral `oncrpc` services: anything that
//! feeds an [`oncrpc::Dispatcher`] serves them. [`server`] runs them on TCP, and NFS
//! on RPC-over-RDMA over the userspace iWARP provider ([`rdma`]).
//!
//! # Copies per byte on the data path
//!
//! - **READ over TCP**: no copy by the server. The handler fixes count, eof and the
//!   post-op attributes from the opened file's size and leaves the data in the file
//!   ([`xdr::Encoder::ddp_file`]); `oncrpc`'s TCP writer sends the header, then the
//!   range from the page cache by `sendfile` (the socket takes references to the
//!   page-cache pages).
//! - **READ over RDMA**: 1 copy on the server. `pread` copies file data (page cache)
//!   into a pooled buffer, which becomes the READ3resok `data` as a [`bytes::Bytes`]
//!   without a copy and is encoded as a DDP-eligible item
//!   ([`xdr::Encoder::ddp_opaque`]): the gather list of the RDMA Write into the
//!   client's Write chunk (no further copy in userspace; the iWARP provider's socket
//!   write is the kernel's copy).
//! - **WRITE**: 1 copy on the server. The WRITE3args `data` is a slice of the received
//!   call buffer (decoding copies nothing); `pwrite` copies it into the page cache.
//!   Over RDMA the data is pulled by RDMA Read into a sink region; the transport makes
//!   the call contiguous for the dispatcher (one copy, `rpcrdma_transport`).
//!   (Reassembling a TCP record from several fragments, if a client fragments, costs
//!   one more copy in the record layer.)
//!
//! # What this crate does not do
//!
//! NFSv4.1's delegations and back channel ([`v4`] lists what it serves), NFSv4.0 and
//! 4.2, NLM over UDP (locking is [`nlm`], on TCP),
//! ACLs over the wire, UDP, netgroups and host name wildcards in exports
//! ([`exports`]).
#![warn(missing_docs, unreachable_pub)]

pub mod config_file;
pub mod creds;
pub mod delegate;
pub mod dir_cache;
mod dir_locks;
pub mod drc;
pub mod errno;
pub mod exports;
pub mod faccess;
pub mod fh;
pub mod generations;
pub mod handle_key;
pub mod kernel_fh;
pub mod known_handles;
pub mod links;
pub mod malloc;
pub mod memory;
pub mod metrics;
pub mod mount;
pub mod nfs;
pub mod nlm;
pub mod portmap;
mod proc;
pub mod rdma;
pub mod sd_notify;
pub mod seen;
pub mod server;
pub mod service;
pub mod v4;
pub mod vfs;

pub use creds::Squash;
pub use exports::{Clients, ExportLine, ExportOptions};
pub use handle_key::HandleKey;
pub use mount::MountService;
pub use nfs::{Caller, NfsServer, Served, Table};
pub use service::NfsService;
pub use vfs::{Export, HandleConfig, KernelHandles};

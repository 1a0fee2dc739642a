//! An NFS version 3 client (RFC 1813) over ONC RPC, on TCP or RPC-over-RDMA, and the
//! `nfs` command-line tool built on it.
//!
//! ```text
//!   nfs CLI (src/bin/nfs.rs)           bench (later)
//!                 \                      /
//!   Mount: MNT + FSINFO, path walking, create/mkdir/remove helpers   (mounted)
//!     |            |                 |
//!   io: pipelined   readdir: cookie   MountClient (MOUNT v3, TCP)    (mount)
//!   READ / WRITE +  iteration            |
//!   COMMIT verf                        portmap: PMAPPROC_GETPORT
//!     \            /
//!   NfsClient: one typed async method per NFSv3 procedure             (nfs)
//!                 |
//!   oncrpc::Client over a Transport                                   (transport)
//!      TCP (record marking)  |  RPC-over-RDMA (rpcrdma-transport on the iWARP
//!                            |  provider, with the NFSv3 binding of `rdma`)
//! ```
//!
//! Specs: RFC 1813 §3.3 (procedures), Appendix I (MOUNT); RFC 1833 §3 (portmapper);
//! RFC 8267 (NFSv3 over RPC-over-RDMA: the DDP-eligible items and port 20049).
//!
//! - Errors are one typed [`Error`]; an NFS failure carries the procedure and its
//!   `nfsstat3`, a MOUNT failure its `mountstat3`.
//! - READ and WRITE are pipelined ([`io`]): several calls in flight, sized by FSINFO;
//!   WRITEs go UNSTABLE and are COMMITted with a verifier check (data whose WRITE
//!   verifier the COMMIT does not return is sent again). Copies per byte are counted
//!   in [`io`].
//!
//! # Example
//!
//! ```no_run
//! use nfsclient::nfs3::StableHow;
//! use nfsclient::{Mount, MountOptions, TransportKind};
//!
//! # async fn demo() -> nfsclient::Result<()> {
//! let opts = MountOptions {
//!     transport: TransportKind::Rdma, // NFS on port 20049; MOUNT still over TCP
//!     ..MountOptions::default()
//! };
//! let m = Mount::mount("server", "/srv/export", &opts).await?;
//! let (fh, attrs) = m.lookup_path("dir/file").await?;
//! let mut reader = m.reader(&fh, 0, Some(attrs.size)); // several READs in flight
//! while let Some((offset, data)) = reader.next_chunk().await? {
//!     println!("{} bytes at {offset}", data.len()); // `data` is not a copy
//! }
//! let out = m.create_file("dir/copy", 0o644, false).await?;
//! let mut writer = m.writer(&out, StableHow::UNSTABLE);
//! writer.write(0, bytes::Bytes::from_static(b"hello")).await?;
//! writer.finish().await?; // COMMIT, re-sending if the write verifier changed
//! # Ok(())
//! # }
//! ```
//!
//! This crate does not do: NFSv2 or NFSv4, NLM locking, attribute or data caching,
//! RPCSEC_GSS, UDP, or following symbolic links during path walks.
#![warn(missing_docs, unreachable_pub)]

pub mod error;
pub mod io;
pub mod mount;
mod mounted;
pub mod nfs;
pub mod portmap;
pub mod rdma;
pub mod readdir;
mod rpc;
pub mod target;
pub mod transport;

pub use error::{Error, ProtocolViolation, Result};
pub use io::{FileReader, FileWriter, IoOptions};
pub use mount::MountClient;
pub use mounted::{auth_sys_self, components, Mount, MountOptions};
pub use nfs::NfsClient;
pub use readdir::{DirEntry, DirReader, ReadDirSizes};
pub use target::Target;
pub use transport::{RdmaProvider, TransportKind};

/// Re-exported wire types callers need (handles, attributes, statuses).
pub use nfs3;
/// Re-exported RPC-over-RDMA settings and counters ([`MountOptions::rdma`],
/// [`Mount::rdma_stats`]).
pub use rpcrdma_transport::{Counter, RdmaConfig, StatsRegistry};

//! `nfsbench`: the seed paper's experiment (Callaghan et al. 2003, §7) on our stack.
//!
//! Sequential NFSv3 READ throughput and CPU per byte over TCP and over RPC-over-RDMA
//! (userspace iWARP), for a grid of read sizes and reads in flight; sequential WRITE;
//! small-RPC rates (NULL, GETATTR); and a peer comparison with an independent client
//! (libnfs `nfs-cat`) against our server and nfs-ganesha.
//!
//! ```text
//!   main (CLI) ── grid (plan, interleaving, progress) ── workload (READ/WRITE/RPC rate)
//!        │              │                                   │ nfsclient::Mount
//!        │         server (child process: `nfsbench serve`, nfsd library on TCP + RDMA)
//!        │         peers (network namespace: rpcbind, ganesha, our server, nfs-cat)
//!        │         baseline (one loopback TCP stream)   cpu (getrusage, /proc/PID/stat)
//!        └── report (JSON, table, medians, ratios) ── charts (SVG, figures 15/16/17)
//! ```
//!
//! The server always runs as a child process, so its CPU time is separable from the
//! client's (the bench process itself).
//!
//! `nfsbench lab` ([`labrun`]) is the qemu-guest variant: the Linux kernel client reads
//! from knfsd and from our `nfsd` in the guest, over siw or (`--fabric rxe`, with an
//! `ib_write_bw` ceiling) over rxe; with `--with-ganesha` (TCP), from nfs-ganesha too.
//!
//! This crate does not assert performance goals (it reports against them) or tune
//! the crates it measures.
#![warn(missing_docs, unreachable_pub)]

pub mod baseline;
pub mod charts;
pub mod cpu;
pub mod grid;
pub mod handles;
pub mod labmeta;
pub mod labrun;
pub mod machine;
pub mod peers;
pub mod report;
pub mod serve;
pub mod server;
pub mod stats;
pub mod workload;

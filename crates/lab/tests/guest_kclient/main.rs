//! The scenarios where the guest's kernel NFS client (or our server inside the
//! guest) is the guest's part and no knfsd runs: siw stock, no port forwards. One
//! shared boot (`GuestConfig::shared_boot("kclient")`) runs each scenario's
//! script in turn; each is still its own test with its own `lab/out/<run>/`,
//! results, host processes, capture and verdict. `nfs_locking` and `nfs_locking_cthon` need
//! port forwards to the guest's rpcbind, lockd and statd, so they share another boot
//! (`shared_boot("kclient-nlm")`); their names sort next to each other, so that
//! `--test-threads=1` (libtest runs tests in name order) boots that guest once.

#[path = "../common/mod.rs"]
mod common;

mod kclient_to_host_peer;
mod kclient_to_iwarp;
mod nfs4_idmap;
mod nfs4_mount;
mod nfs4_restart;
mod nfs_crash_restart;
mod nfs_exports;
mod nfs_locking;
mod nfs_locking_cthon;
mod nfs_plain_mounts;
mod nfs_rdma;
mod nfs_rdma_guest_server;
mod nfs_rdma_no_vers;
mod nfs_tcp;
mod package_service;
mod verbs_devices;
mod verbs_iwarp_interop;
mod verbs_pingpong;

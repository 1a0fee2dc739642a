//! The scenarios that need the guest's knfsd (siw stock, knfsd with its RDMA
//! listener, ports 20049/20048 forwarded to the host), in one shared boot
//! (`GuestConfig::shared_boot("knfsd")`): the guest boots and sets up siw and
//! knfsd once, then runs each scenario's script in turn. Each scenario is still
//! its own test with its own `lab/out/<run>/`, results, capture and verdict.

#[path = "../common/mod.rs"]
mod common;

mod iwarp_to_knfsd;
mod knfsd_loopback;
mod knfsd_via_hostfwd;
mod rdma_client_knfsd;
mod verbs_client_knfsd;
mod version_two_knfsd;

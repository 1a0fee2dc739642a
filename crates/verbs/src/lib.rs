//! The rdma-core provider of the `rdma` API, first part: RDMA devices found through
//! libibverbs (InfiniBand, RoCE, iWARP NICs, and the kernel's soft-RoCE `rxe` and
//! soft-iWARP `siw`), their attributes, protection domains and memory registration.
//!
//! ```text
//!  devices() -> VerbsDevice ---- impl rdma::Device (name, attributes, alloc_pd)
//!                   | alloc_pd(): ibv_alloc_pd
//!  rdma::ProtectionDomain::with_registrar(VerbsRegistrar) -- register*(..) -> rdma::MemoryRegion
//!                   |                                         (the device's lkey, rkey)
//!  sys (the only unsafe module): ibv_get_device_list/open/query, ibv_alloc_pd, ibv_reg_mr
//!                   |
//!  rdma-mummy-sys: bindings + a shim that dlopens libibverbs.so.1 at run time
//! ```
//!
//! Memory registered on a verbs device is an ordinary `rdma::MemoryRegion` (owned
//! buffers, the consumer's bytes, pooled buffers), with the `rdma` crate's checks and
//! ownership; `mr::VerbsRegistrar` adds the device's registration, which the
//! region drops before its memory.
//!
//! What it does **not** do yet (issue 14): queue pairs, completion queues with a
//! completion channel, connection management through librdmacm, and being the device
//! behind `rdma::Route`/`rdma::ConnectRequest`.
//!
//! A binary using this crate starts on hosts without rdma-core: libibverbs is loaded
//! when the process starts, and its absence shows as [`OpenError::NoLibrary`] from
//! [`devices`], as a kernel without RDMA shows as [`OpenError::NoKernelSupport`].
#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

mod device;
mod mr;
mod sys;

pub use device::{devices, LinkLayer, OpenError, PortInfo, PortState, Transport, VerbsDevice};

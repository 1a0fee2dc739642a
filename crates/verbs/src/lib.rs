//! The rdma-core provider of the `rdma` API, first part: RDMA devices found through
//! libibverbs (InfiniBand, RoCE, iWARP NICs, and the kernel's soft-RoCE `rxe` and
//! soft-iWARP `siw`), their attributes, protection domains and memory registration.
//!
//! ```text
//!  devices() -> VerbsDevice ---- impl rdma::Device (name, attributes; alloc_pd: see below)
//!                   | alloc_verbs_pd()
//!               VerbsPd ---- register(BytesMut | Bytes, Access) -> VerbsMr (lkey, rkey)
//!                   |
//!  sys (the only unsafe module): ibv_get_device_list/open/query, ibv_alloc_pd, ibv_reg_mr
//!                   |
//!  rdma-mummy-sys: bindings + a shim that dlopens libibverbs.so.1 at run time
//! ```
//!
//! What it does **not** do yet (issue 14): queue pairs, completion queues with a
//! completion channel, connection management through librdmacm, and being the device
//! behind `rdma::Route`/`rdma::ConnectRequest`. [`rdma::Device::alloc_pd`] returns
//! `rdma::ProtectionDomain`, which today is the software registration table only, so
//! [`VerbsDevice`]'s implementation of it fails with
//! [`rdma::RegisterError::Provider`] (kind `Unsupported`) instead of handing out a
//! table the device knows nothing about; the extension the `rdma` crate needs is
//! described in docs/verbs-provider.md. Until then verbs registration is
//! [`VerbsDevice::alloc_verbs_pd`] and [`VerbsPd::register`].
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
pub use mr::{VerbsMr, VerbsPd};

//! The rdma-core provider of the `rdma` API, first part: RDMA devices found through
//! libibverbs (InfiniBand, RoCE, iWARP NICs, and the kernel's soft-RoCE `rxe` and
//! soft-iWARP `siw`), their attributes, protection domains and memory registration.
//!
//! ```text
//!  devices() -> VerbsDevice ---- impl rdma::Device (name, attributes, alloc_pd)
//!                   | alloc_pd(): ibv_alloc_pd
//!  rdma::ProtectionDomain::with_registrar(VerbsRegistrar) -- register*(..) -> rdma::MemoryRegion
//!                   |                                         (the device's lkey, rkey)
//!  sys, sys_conn (unsafe): ibv_get_device_list/open/query, ibv_alloc_pd, ibv_reg_mr, CM, QP
//!                   |
//!  ffi (unsafe): rdma-core's types (committed bindgen output), libibverbs.so.1 and
//!                librdmacm.so.1 dlopened at first use, the headers' inline verbs
//! ```
//!
//! Memory registered on a verbs device is an ordinary `rdma::MemoryRegion` (owned
//! buffers, the consumer's bytes, pooled buffers), with the `rdma` crate's checks and
//! ownership; `mr::VerbsRegistrar` adds the device's registration, which the
//! region drops before its memory.
//!
//! Connections: [`VerbsCm`] is an `rdma::ConnectionManager` over librdmacm (event
//! channels whose fds tokio watches; private data, IRD/ORD clamped to the device,
//! reject, DISCONNECTED and DEVICE_REMOVAL as `rdma::QpEvent::Disconnected`), its
//! routes and connect requests name the device librdmacm bound the id to, and
//! [`VerbsQp`] is an `rdma::QueuePair` (`rdma_create_qp`; Send, Send With
//! Invalidate, RDMA Write/Read, LOCAL_INV; one CQ on a completion channel whose fd
//! tokio watches).
//!
//! Addressing: a region on a verbs device is VA-based (`ibv_reg_mr`): the tagged
//! offset a peer names its byte `i` by is that byte's address
//! (`rdma::MemoryRegion::remote_offset`), not `i` as in the software providers.
//! Zero-based registration needs page-aligned memory (the kernel refuses it
//! otherwise), which the `rdma` crate's regions are not.
//!
//! Device events: [`watch_device_events`] reports a device's asynchronous events
//! (port down/up, address changes, fatal errors) as [`DeviceEvent`]s.
//!
//! `unsafe` code lives in `ffi` (loading, the headers' inline verbs), `sys` (devices,
//! PDs, MRs, async events) and `sys_conn` (CM, QP, CQ), each with its invariants
//! written down.
//!
//! A binary using this crate starts on hosts without rdma-core: nothing links it;
//! libibverbs is loaded at the first [`devices`] call (librdmacm at the first
//! [`VerbsCm`] use), and its absence shows as [`OpenError::NoLibrary`] from
//! [`devices`], as a kernel without RDMA shows as [`OpenError::NoKernelSupport`].
#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

mod cm;
mod device;
mod events;
mod ffi;
mod limits;
mod mr;
mod qp;
mod sys;
mod sys_conn;

pub use cm::{VerbsCm, VerbsListener, VerbsRequest, VerbsRoute};
pub use device::{devices, LinkLayer, OpenError, PortInfo, PortState, Transport, VerbsDevice};
pub use events::{watch_device_events, DeviceEvent, DeviceEventKind};
pub use limits::{locked_memory_limit, raise_locked_memory_limit};
pub use qp::{InlineData, VerbsQp};

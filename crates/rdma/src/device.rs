//! Devices: what a provider's connection manager finds behind an address, and what
//! creates protection domains.
//!
//! As in verbs, memory is registered against a protection domain, and a protection
//! domain belongs to one device (`ibv_alloc_pd(context)`); the device that carries a
//! connection is only known once the connection manager has resolved the peer's
//! address (`rdma_resolve_addr` binds the CM id to a device) or received a connect
//! request (its CM id names the device). So consumers do not make protection domains
//! themselves: they ask the device of a [`crate::Route`] or a
//! [`crate::ConnectRequest`] for one, as Linux xprtrdma (`rpcrdma_ep_create`) and
//! svcrdma (`svc_rdma_accept`) allocate one per connection from the CM id's device.
//!
//! Software providers (the userspace iWARP provider, in-process test providers) share
//! [`SoftwareDevice`], whose protection domains have the STag table of
//! [`crate::software`].
#![allow(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use crate::access::{Access, STag};
use crate::mr::ProtectionDomain;
use crate::software::SoftwarePd;

/// What a device can do, as far as the protocol above it cares (verbs
/// `ibv_device_attr`). Consumers size their queues, Read depths and registrations from
/// it instead of assuming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceAttributes {
    /// Largest memory region, in bytes (`max_mr_size`).
    pub max_mr_size: u64,
    /// Most memory regions registered at once in one protection domain (`max_mr`).
    pub max_mr: u32,
    /// Most scatter/gather elements per work request (`max_sge`).
    pub max_sge: u32,
    /// Most outstanding work requests per queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most inbound RDMA Reads a queue pair can have outstanding: the IRD it can offer
    /// (`max_qp_rd_atom`).
    pub max_ird: u16,
    /// Most outbound RDMA Reads a queue pair can have outstanding: the ORD it can ask
    /// for (`max_qp_init_rd_atom`).
    pub max_ord: u16,
    /// Whether a region's keys can be invalidated by posted work (LOCAL_INV) and by a
    /// peer's Send With Invalidate. Software providers can; a verbs device cannot for
    /// plain registrations (`ibv_reg_mr`: rxe and siw refuse it; user-space verbs has
    /// no fast registration, only memory windows). Without it a consumer fences a
    /// region by deregistering it, and must not offer remote invalidation (RFC 8797).
    pub invalidate: bool,
}

impl DeviceAttributes {
    /// The limits of the software providers' STag table and of RDMAP (RFC 5040
    /// §5.3: message and Read sizes are 32-bit quantities): what software providers
    /// offer unless configured otherwise.
    pub const SOFTWARE: DeviceAttributes = DeviceAttributes {
        max_mr_size: u32::MAX as u64,
        max_mr: 1 << STag::INDEX_BITS,
        max_sge: 64,
        max_qp_wr: 4096,
        max_ird: 64,
        max_ord: 64,
        invalidate: true,
    };
}

impl Default for DeviceAttributes {
    fn default() -> Self {
        DeviceAttributes::SOFTWARE
    }
}

/// Why a device refused to create a protection domain or register memory.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The region is larger than the device registers (`max_mr_size`).
    #[error("memory region of {len} bytes exceeds the device's limit of {max} bytes")]
    TooLarge {
        /// Requested length.
        len: u64,
        /// The device's `max_mr_size`.
        max: u64,
    },
    /// The protection domain already holds as many regions as the device allows.
    #[error("the protection domain already holds the device's limit of {max} memory regions")]
    TooMany {
        /// The device's `max_mr`.
        max: u32,
    },
    /// A combination of rights the device refuses (verbs: remote write needs local
    /// write).
    #[error("invalid access rights: {0}")]
    InvalidAccess(&'static str),
    /// The provider (a kernel driver, a NIC) refused, e.g. out of pinnable memory.
    #[error("the provider refused the registration: {0}")]
    Provider(#[from] std::io::Error),
}

/// A device's registration of one region's memory (verbs `struct ibv_mr`): its keys.
/// Dropping it deregisters the memory from the device (`ibv_dereg_mr`).
pub trait DeviceRegistration: Send + Sync {
    /// The local key (`ibv_mr.lkey`).
    fn lkey(&self) -> u32;
    /// The remote key (`ibv_mr.rkey`).
    fn rkey(&self) -> u32;
    /// The address a peer names the region's first byte by (its tagged offset 0):
    /// the memory's virtual address for a registration by address (`ibv_reg_mr`),
    /// 0 for a zero-based one.
    fn remote_base(&self) -> u64;
}

/// How a device registers memory in its protection domains
/// ([`ProtectionDomain::with_registrar`]), which alone calls it.
pub trait Registrar: Send + Sync {
    /// Registers `mem` with `access` rights (`ibv_reg_mr`). The `rdma` crate has made
    /// its own checks first (size, count, rights).
    ///
    /// # Safety
    /// The caller keeps `mem` allocated, at the same address and length, until the
    /// returned registration is dropped, and drops the registration before the memory
    /// is handed back or freed; if `access` lets the device write, no one else reads
    /// or writes those bytes while the registration lives, and shared (immutable)
    /// bytes are never registered with write rights. So a registrar may hand the
    /// address to hardware.
    unsafe fn register(
        &self,
        mem: &[u8],
        access: Access,
    ) -> Result<Box<dyn DeviceRegistration>, RegisterError>;

    /// The registrar as its concrete type, by which a provider gets its own protection
    /// domain back from a consumer's [`ProtectionDomain`]
    /// ([`ProtectionDomain::registrar`]; verbs: the `ibv_pd` a queue pair is created
    /// on). Implementations return `self`.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// An RDMA device: the thing a provider's connection manager resolved an address to,
/// and the factory of protection domains (module docs).
pub trait Device: Send + Sync + fmt::Debug {
    /// The device's name, for logs (verbs: `rxe0`, `mlx5_0`; software: `iwarp`).
    fn name(&self) -> &str;

    /// Its limits.
    fn attributes(&self) -> DeviceAttributes;

    /// A new protection domain on this device.
    fn alloc_pd(&self) -> Result<ProtectionDomain, RegisterError>;
}

/// The device of software providers: its protection domains have the STag table
/// ([`crate::software::SoftwarePd`]), limited by [`DeviceAttributes`].
#[derive(Clone, Debug)]
pub struct SoftwareDevice {
    name: Arc<str>,
    attributes: DeviceAttributes,
}

impl SoftwareDevice {
    /// A software device called `name` with `attributes`.
    pub fn new(name: &str, attributes: DeviceAttributes) -> SoftwareDevice {
        SoftwareDevice {
            name: name.into(),
            attributes,
        }
    }
}

impl Default for SoftwareDevice {
    fn default() -> Self {
        SoftwareDevice::new("software", DeviceAttributes::SOFTWARE)
    }
}

impl Device for SoftwareDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn attributes(&self) -> DeviceAttributes {
        self.attributes
    }

    fn alloc_pd(&self) -> Result<ProtectionDomain, RegisterError> {
        Ok(SoftwarePd::new(self.attributes).into())
    }
}

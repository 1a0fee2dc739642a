//! Devices: what libibverbs lists, with the attributes the protocol sizes itself by.

use std::fmt;
use std::io;
use std::sync::Arc;

use rdma::{DeviceAttributes, RegisterError};

use crate::mr::VerbsRegistrar;
use crate::sys;

/// Why the device list could not be had (before any device is looked at), or a
/// device could not be opened or queried.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// libibverbs could not be loaded: `dlopen("libibverbs.so.1")` failed at the first
    /// [`devices`] call (rdma-core is not installed), or the library lacks a function
    /// this crate calls.
    #[error(
        "libibverbs.so.1 could not be loaded (install rdma-core's libibverbs1 and the \
         verbs providers, Debian: libibverbs1 ibverbs-providers)"
    )]
    NoLibrary,
    /// libibverbs found no RDMA support in the kernel (ENOSYS from
    /// `ibv_get_device_list`: no `/sys/class/infiniband_verbs`, i.e. no RDMA device
    /// driver and `ib_uverbs` not loaded).
    #[error("the kernel offers no RDMA verbs (no RDMA device driver, or ib_uverbs not loaded)")]
    NoKernelSupport,
    /// `ibv_get_device_list` failed otherwise.
    #[error("ibv_get_device_list: {0}")]
    List(io::Error),
    /// A listed device could not be opened or queried.
    #[error("RDMA device {name}: {op}: {source}")]
    Device {
        /// The device's name (`rxe0`, `mlx5_0`).
        name: String,
        /// The verb that failed.
        op: &'static str,
        /// Its errno.
        source: io::Error,
    },
}

impl OpenError {
    /// The error for a failed [`sys::open_devices`].
    pub(crate) fn from_list_error(e: sys::ListError) -> OpenError {
        const ENOSYS: i32 = 38;
        match e {
            sys::ListError::NoLibrary => OpenError::NoLibrary,
            sys::ListError::Os(e) if e.raw_os_error() == Some(ENOSYS) => OpenError::NoKernelSupport,
            sys::ListError::Os(e) => OpenError::List(e),
        }
    }
}

/// The transport a device speaks (`ibv_device.transport_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// InfiniBand transport: InfiniBand, or RoCE when the port's link layer is
    /// Ethernet (`rxe`, ConnectX on Ethernet).
    InfiniBand,
    /// iWARP (RFC 5040/5041/5044): `siw`, Chelsio, Intel.
    Iwarp,
    /// Anything else (usNIC, unknown), with the raw value.
    Other(i32),
}

impl Transport {
    fn from_raw(v: i32) -> Transport {
        match v {
            0 => Transport::InfiniBand,
            1 => Transport::Iwarp,
            v => Transport::Other(v),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::InfiniBand => f.write_str("ib"),
            Transport::Iwarp => f.write_str("iwarp"),
            Transport::Other(v) => write!(f, "other({v})"),
        }
    }
}

/// A port's link layer (`ibv_port_attr.link_layer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet: RoCE or iWARP.
    Ethernet,
    /// Unspecified or unknown, with the raw value (old providers report 0 for IB).
    Other(u8),
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkLayer::InfiniBand => f.write_str("infiniband"),
            LinkLayer::Ethernet => f.write_str("ethernet"),
            LinkLayer::Other(v) => write!(f, "other({v})"),
        }
    }
}

/// A port's logical state (`ibv_port_attr.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// Link down.
    Down,
    /// Link up, not yet configured (InfiniBand: no subnet manager yet).
    Init,
    /// Configured, not yet active.
    Armed,
    /// Ready to carry traffic.
    Active,
    /// Anything else, with the raw value.
    Other(u32),
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("down"),
            PortState::Init => f.write_str("init"),
            PortState::Armed => f.write_str("armed"),
            PortState::Active => f.write_str("active"),
            PortState::Other(v) => write!(f, "other({v})"),
        }
    }
}

/// Port 1 of a device, as `ibv_query_port` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Logical state.
    pub state: PortState,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active path MTU in bytes (256..4096), 0 if the device reported none.
    pub active_mtu: u32,
}

impl PortInfo {
    fn from_raw(p: sys::RawPortAttr) -> PortInfo {
        PortInfo {
            state: match p.state {
                1 => PortState::Down,
                2 => PortState::Init,
                3 => PortState::Armed,
                4 => PortState::Active,
                v => PortState::Other(v),
            },
            link_layer: match p.link_layer {
                1 => LinkLayer::InfiniBand,
                2 => LinkLayer::Ethernet,
                v => LinkLayer::Other(v),
            },
            // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5.
            active_mtu: match p.active_mtu {
                m @ 1..=5 => 128 << m,
                _ => 0,
            },
        }
    }
}

/// The protocol-relevant limits of `ibv_device_attr`, clamped into the `rdma` crate's
/// types: a negative count (a provider bug) becomes 0, IRD/ORD above `u16::MAX`
/// become `u16::MAX`.
pub(crate) fn attributes_from(a: &sys::RawDeviceAttr) -> DeviceAttributes {
    let count = |v: i32| u32::try_from(v).unwrap_or(0);
    let depth = |v: i32| u16::try_from(v.max(0)).unwrap_or(u16::MAX);
    DeviceAttributes {
        max_mr_size: a.max_mr_size,
        max_mr: count(a.max_mr),
        max_sge: count(a.max_sge),
        max_qp_wr: count(a.max_qp_wr),
        max_ird: depth(a.max_qp_rd_atom),
        max_ord: depth(a.max_qp_init_rd_atom),
        // Plain `ibv_reg_mr` registrations: rxe and siw refuse remote invalidation of
        // them (lab: verbs_pingpong), and user space has no fast registration.
        invalidate: false,
    }
}

/// An open RDMA device (an `ibv_context`), with its attributes read once at open.
#[derive(Clone)]
pub struct VerbsDevice {
    ctx: Arc<sys::Context>,
    attributes: DeviceAttributes,
    transport: Transport,
    port: PortInfo,
    vendor: (u32, u32),
}

impl fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsDevice")
            .field("name", &self.ctx.name())
            .field("transport", &self.transport)
            .field("port", &self.port)
            .field("attributes", &self.attributes)
            .finish()
    }
}

/// Opens every RDMA device libibverbs lists and reads its attributes and port 1.
/// An empty list is not an error here (the caller knows whether it needed one).
pub fn devices() -> Result<Vec<VerbsDevice>, OpenError> {
    let opened = sys::open_devices().map_err(OpenError::from_list_error)?;
    opened
        .into_iter()
        .map(|r| {
            let ctx = r.map_err(|(name, source)| OpenError::Device {
                name,
                op: "ibv_open_device",
                source,
            })?;
            VerbsDevice::new(Arc::new(ctx))
        })
        .collect()
}

impl VerbsDevice {
    /// The device of a CM id's context (librdmacm's, kept open by the id).
    pub(crate) fn from_context(ctx: sys::Context) -> Result<VerbsDevice, OpenError> {
        VerbsDevice::new(Arc::new(ctx))
    }

    /// The device PD behind `pd`, if `pd` was allocated on this device (its
    /// `ibv_context`: librdmacm gives every CM id of one device the same context).
    pub(crate) fn device_pd(&self, pd: &rdma::ProtectionDomain) -> Option<Arc<sys::Pd>> {
        let registrar = pd.registrar()?.as_any().downcast_ref::<VerbsRegistrar>()?;
        let dpd = registrar.pd();
        (dpd.context().as_ptr() == self.ctx.as_ptr()).then(|| dpd.clone())
    }

    fn new(ctx: Arc<sys::Context>) -> Result<VerbsDevice, OpenError> {
        let failed = |op, source| OpenError::Device {
            name: ctx.name().to_string(),
            op,
            source,
        };
        let raw = ctx
            .query_device()
            .map_err(|e| failed("ibv_query_device", e))?;
        let port = ctx.query_port(1).map_err(|e| failed("ibv_query_port", e))?;
        Ok(VerbsDevice {
            attributes: attributes_from(&raw),
            transport: Transport::from_raw(ctx.transport()),
            port: PortInfo::from_raw(port),
            vendor: (raw.vendor_id, raw.vendor_part_id),
            ctx,
        })
    }

    /// The transport it speaks.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// `ibv_device.node_type` (1 CA, 4 RNIC, ...).
    pub fn node_type(&self) -> i32 {
        self.ctx.node_type()
    }

    /// Port 1 as it was when the device was opened.
    pub fn port(&self) -> PortInfo {
        self.port
    }

    /// (vendor id, vendor part id).
    pub fn vendor(&self) -> (u32, u32) {
        self.vendor
    }
}

impl rdma::Device for VerbsDevice {
    fn name(&self) -> &str {
        self.ctx.name()
    }

    fn attributes(&self) -> DeviceAttributes {
        self.attributes
    }

    /// A protection domain of this device (`ibv_alloc_pd`) whose regions are
    /// registered with the device (`ibv_reg_mr`, through `VerbsRegistrar`).
    fn alloc_pd(&self) -> Result<rdma::ProtectionDomain, RegisterError> {
        let pd = Arc::new(sys::Pd::alloc(&self.ctx)?);
        Ok(rdma::ProtectionDomain::with_registrar(
            self.attributes,
            Arc::new(VerbsRegistrar::new(pd)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_errors_name_the_missing_piece() {
        assert!(matches!(
            OpenError::from_list_error(sys::ListError::NoLibrary),
            OpenError::NoLibrary
        ));
        let os = |e| sys::ListError::Os(io::Error::from_raw_os_error(e));
        assert!(matches!(
            OpenError::from_list_error(os(38)),
            OpenError::NoKernelSupport
        ));
        assert!(matches!(
            OpenError::from_list_error(os(95)),
            OpenError::List(e) if e.raw_os_error() == Some(95)
        ));
        assert!(matches!(
            OpenError::from_list_error(os(12)),
            OpenError::List(e) if e.raw_os_error() == Some(12)
        ));
    }

    #[test]
    fn attributes_are_clamped_into_the_api_types() {
        let raw = sys::RawDeviceAttr {
            max_mr_size: u64::MAX,
            max_qp_wr: 16384,
            max_sge: -1,
            max_mr: 1 << 20,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 1 << 20,
            ..Default::default()
        };
        let a = attributes_from(&raw);
        assert_eq!(a.max_mr_size, u64::MAX);
        assert_eq!(a.max_qp_wr, 16384);
        assert_eq!(a.max_sge, 0, "a negative count is no capacity");
        assert_eq!(a.max_mr, 1 << 20);
        assert_eq!(a.max_ird, 128);
        assert_eq!(a.max_ord, u16::MAX, "IRD/ORD saturate at the API's u16");
    }

    #[test]
    fn port_fields_decode_the_verbs_enums() {
        let p = PortInfo::from_raw(sys::RawPortAttr {
            state: 4,
            link_layer: 2,
            active_mtu: 3,
        });
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.link_layer, LinkLayer::Ethernet);
        assert_eq!(p.active_mtu, 1024);
        let q = PortInfo::from_raw(sys::RawPortAttr {
            state: 9,
            link_layer: 0,
            active_mtu: 0,
        });
        assert_eq!(q.state, PortState::Other(9));
        assert_eq!(q.link_layer, LinkLayer::Other(0));
        assert_eq!(q.active_mtu, 0);
        assert_eq!(
            PortInfo::from_raw(sys::RawPortAttr {
                active_mtu: 5,
                ..Default::default()
            })
            .active_mtu,
            4096
        );
    }

    #[test]
    fn transport_names_rxe_and_siw_apart() {
        assert_eq!(Transport::from_raw(0), Transport::InfiniBand);
        assert_eq!(Transport::from_raw(1), Transport::Iwarp);
        assert_eq!(Transport::from_raw(-1), Transport::Other(-1));
        assert_eq!(Transport::Iwarp.to_string(), "iwarp");
    }
}

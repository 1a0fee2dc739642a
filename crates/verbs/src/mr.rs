//! Memory registration with the device (`ibv_reg_mr`), behind the `rdma` API: a verbs
//! device's protection domain is an `rdma::ProtectionDomain` with a
//! [`VerbsRegistrar`], so regions keep the `rdma` crate's checks, ownership and
//! buffer pools and carry the device's keys.
//!
//! CPU access while work is outstanding on a region is the consumer's to avoid, as on
//! every verbs provider: the device writes into the region without telling the CPU.

use std::io;
use std::sync::Arc;

use rdma::{Access, DeviceRegistration, RegisterError, Registrar};

use crate::sys;

/// Registers the regions of one verbs protection domain (`ibv_alloc_pd`) with the
/// device.
pub(crate) struct VerbsRegistrar {
    pd: Arc<sys::Pd>,
}

impl VerbsRegistrar {
    pub(crate) fn new(pd: Arc<sys::Pd>) -> VerbsRegistrar {
        VerbsRegistrar { pd }
    }

    /// The device PD it registers in: what `rdma_create_qp` takes for a protection
    /// domain a consumer hands to `connect` or `accept`.
    pub(crate) fn pd(&self) -> &Arc<sys::Pd> {
        &self.pd
    }
}

/// `rdma::Access` as `IBV_ACCESS_*` bits.
fn ibv_access(access: Access) -> i32 {
    let mut bits = 0;
    if access.contains(Access::LOCAL_WRITE) {
        bits |= sys::access::LOCAL_WRITE;
    }
    if access.contains(Access::REMOTE_WRITE) {
        bits |= sys::access::REMOTE_WRITE;
    }
    if access.contains(Access::REMOTE_READ) {
        bits |= sys::access::REMOTE_READ;
    }
    bits
}

/// One region's registration with the device (deregistered when dropped), by
/// address: a peer names byte `i` by `base + i`.
struct VerbsRegistration {
    mr: sys::Mr,
    base: u64,
}

impl DeviceRegistration for VerbsRegistration {
    fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    fn remote_base(&self) -> u64 {
        self.base
    }
}

// The trait's method is `unsafe` (its caller keeps the memory alive); the only unsafe
// operation here is the call into `sys`, under that same contract.
#[allow(unsafe_code)]
impl Registrar for VerbsRegistrar {
    unsafe fn register(
        &self,
        mem: &[u8],
        access: Access,
    ) -> Result<Box<dyn DeviceRegistration>, RegisterError> {
        if mem.is_empty() {
            // The kernel pins pages for a registration; an empty one has none (EINVAL).
            return Err(RegisterError::Provider(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a zero-length region cannot be registered with a device",
            )));
        }
        // SAFETY: the `rdma::Registrar` contract this method is called under (the
        // memory outlives the registration; write rights only for memory no one
        // else touches) is `sys::Mr::register`'s.
        let mr = unsafe { sys::Mr::register(&self.pd, mem, ibv_access(access)) }
            .map_err(|e| RegisterError::Provider(crate::limits::explain_registration_error(e)))?;
        Ok(Box::new(VerbsRegistration {
            mr,
            base: mem.as_ptr() as u64,
        }))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_maps_to_the_verbs_bits() {
        assert_eq!(ibv_access(Access::NONE), 0);
        assert_eq!(
            ibv_access(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ),
            1 | 2 | 4
        );
        assert_eq!(ibv_access(Access::REMOTE_READ), 4);
    }
}

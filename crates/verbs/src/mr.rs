//! Protection domains and memory regions registered with the device (`ibv_reg_mr`).
//!
//! A [`VerbsMr`] owns the memory it registers (a `BytesMut`, or the consumer's
//! immutable `Bytes`), as `rdma::MemoryRegion` does, so the memory cannot be freed or
//! moved while the device may access it (`sys` invariant 4).
//!
//! CPU access while work is outstanding on the region is the consumer's to avoid, as
//! on every verbs provider: the device writes into the region without telling the CPU.

use std::io;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rdma::{Access, DeviceAttributes, RegisterError, STag};

use crate::sys;

/// A protection domain of a [`crate::VerbsDevice`] (`ibv_alloc_pd`).
pub struct VerbsPd {
    pd: Arc<sys::Pd>,
    attributes: DeviceAttributes,
}

impl std::fmt::Debug for VerbsPd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsPd").finish_non_exhaustive()
    }
}

/// A memory region registered with the device. Deregistered when dropped (or by
/// [`VerbsMr::deregister`], which hands the buffer back).
pub struct VerbsMr {
    /// The registration, owning the memory (`sys` invariant 4).
    reg: sys::Mr,
    access: Access,
}

impl std::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsMr")
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("len", &self.len())
            .field("access", &self.access)
            .finish()
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

/// The checks `ibv_reg_mr` would fail with, made first so that the error says why
/// (the `rdma` crate's software table makes the same ones).
fn check(len: usize, access: Access, attributes: &DeviceAttributes) -> Result<(), RegisterError> {
    if len as u64 > attributes.max_mr_size {
        return Err(RegisterError::TooLarge {
            len: len as u64,
            max: attributes.max_mr_size,
        });
    }
    // ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set,
    // then IBV_ACCESS_LOCAL_WRITE must be set too."
    if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
        return Err(RegisterError::InvalidAccess(
            "remote write without local write",
        ));
    }
    if len == 0 {
        // The kernel pins pages for a registration; an empty one has none (EINVAL).
        return Err(RegisterError::Provider(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a zero-length region cannot be registered with a device",
        )));
    }
    Ok(())
}

impl VerbsPd {
    pub(crate) fn new(pd: sys::Pd, attributes: DeviceAttributes) -> VerbsPd {
        VerbsPd {
            pd: Arc::new(pd),
            attributes,
        }
    }

    /// Registers `buf` with `access` rights (`ibv_reg_mr` on its memory).
    ///
    /// Fails before asking the device for a region larger than `max_mr_size`, remote
    /// write without local write, or an empty region; then as the device does.
    pub fn register(&self, buf: BytesMut, access: Access) -> Result<VerbsMr, RegisterError> {
        check(buf.len(), access, &self.attributes)?;
        let reg = sys::Mr::register(&self.pd, sys::Mem::Owned(buf), ibv_access(access))
            .map_err(|(e, _)| RegisterError::Provider(e))?;
        Ok(VerbsMr { reg, access })
    }

    /// Registers the consumer's `buf` without copying it, for the device to read only
    /// (a Send's or an RDMA Read's data source): rights that let the device write
    /// (`LOCAL_WRITE`, `REMOTE_WRITE`) are refused, since the bytes are shared and
    /// immutable.
    pub fn register_bytes(&self, buf: Bytes, access: Access) -> Result<VerbsMr, RegisterError> {
        if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
            return Err(RegisterError::InvalidAccess(
                "shared bytes are immutable: no local or remote write",
            ));
        }
        check(buf.len(), access, &self.attributes)?;
        let reg = sys::Mr::register(&self.pd, sys::Mem::Shared(buf), ibv_access(access))
            .map_err(|(e, _)| RegisterError::Provider(e))?;
        Ok(VerbsMr { reg, access })
    }
}

impl VerbsMr {
    /// The local key, named in gather/scatter lists (`ibv_mr.lkey`).
    pub fn lkey(&self) -> STag {
        STag(self.reg.lkey())
    }

    /// The remote key a peer names the region by (`ibv_mr.rkey`); `None` without
    /// remote rights (the device still reports a value, but no peer may use it).
    pub fn rkey(&self) -> Option<STag> {
        let remote =
            self.access.contains(Access::REMOTE_READ) || self.access.contains(Access::REMOTE_WRITE);
        remote.then(|| STag(self.reg.rkey()))
    }

    /// The rights given at registration.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Length in bytes (never 0).
    pub fn len(&self) -> usize {
        self.reg.mem().as_slice().len()
    }

    /// Always false: empty regions are refused at registration.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address the device knows the region's first byte by (what a chunk
    /// segment's offset names for this region, with `rkey`).
    pub fn addr(&self) -> u64 {
        self.reg.mem().as_slice().as_ptr() as u64
    }

    /// Runs `f` over the region's bytes (module docs: not while the device writes).
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.reg.mem().as_slice())
    }

    /// Deregisters (`ibv_dereg_mr`) and hands the buffer back; a region of shared
    /// bytes hands back those bytes (`Bytes` of either kind, without a copy).
    pub fn deregister(self) -> Bytes {
        match self.reg.into_mem() {
            sys::Mem::Owned(b) => b.freeze(),
            sys::Mem::Shared(b) => b,
        }
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

    #[test]
    fn checks_refuse_what_ibv_reg_mr_would() {
        let attrs = DeviceAttributes {
            max_mr_size: 1 << 20,
            ..DeviceAttributes::SOFTWARE
        };
        assert!(matches!(
            check((1 << 20) + 1, Access::LOCAL_WRITE, &attrs),
            Err(RegisterError::TooLarge { len, max }) if len == (1 << 20) + 1 && max == 1 << 20
        ));
        assert!(matches!(
            check(4096, Access::REMOTE_WRITE, &attrs),
            Err(RegisterError::InvalidAccess(_))
        ));
        assert!(matches!(
            check(0, Access::LOCAL_WRITE, &attrs),
            Err(RegisterError::Provider(e)) if e.kind() == io::ErrorKind::InvalidInput
        ));
        assert!(check(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE, &attrs).is_ok());
    }
}

//! Protection domains and memory regions, for every provider.
//!
//! A region owns its memory (or borrows the consumer's bytes, or a pooled buffer's
//! range) and carries the keys peers and work requests name it by. How those keys are
//! made is the protection domain's [`Keys`]: a device that registers memory itself
//! (verbs: `ibv_reg_mr` through a [`Registrar`]) gives its own lkey and rkey; a
//! software provider's protection domain names regions in the STag table of
//! [`crate::software`], which that provider resolves peers' accesses through.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::{Bytes, BytesMut};

use crate::access::{Access, STag};
use crate::device::{DeviceAttributes, DeviceRegistration, RegisterError, Registrar};
use crate::pool::{self, BufferError, Lent, PooledBuffer};
use crate::software::Table;

static NEXT_PD_ID: AtomicU64 = AtomicU64::new(1);

/// A protection domain: a namespace of memory regions and the queue pairs that may
/// use them. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

/// Who makes a protection domain's keys and checks accesses by them.
pub(crate) enum Keys {
    /// A software provider, through the STag table of [`crate::software`].
    Software(Mutex<Table>),
    /// A device that registers memory itself (a verbs device) and checks peers'
    /// accesses in its own tables.
    Device(Arc<dyn Registrar>),
}

pub(crate) struct PdInner {
    id: u64,
    /// The device's limits, checked at registration.
    attributes: DeviceAttributes,
    pub(crate) keys: Keys,
    /// Registrations the device made (`registrar` calls that succeeded).
    device_registrations: AtomicU64,
    /// Regions that used a pooled allocation's cached registration instead.
    cached_registrations: AtomicU64,
}

/// How a protection domain's regions got their device registrations
/// ([`ProtectionDomain::registration_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegistrationStats {
    /// Registrations the device made (for a verbs device, `ibv_reg_mr` calls).
    pub device: u64,
    /// Regions for local access that used the cached registration of their pooled
    /// allocation instead of a registration of their own ([`crate::pool`]).
    pub cached: u64,
}

/// How a memory region is known to its device ([`MemoryRegion::registered`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    /// In the software providers' STag table only ([`crate::software`]).
    Software,
    /// By a device registration of its own (verbs `ibv_reg_mr` for this region).
    Device,
    /// By the cached device registration of its pooled allocation ([`crate::pool`]).
    Cached,
}

/// A region's share of the cached registration of its pooled allocation.
struct CachedShare(Arc<dyn DeviceRegistration>);

impl DeviceRegistration for CachedShare {
    fn lkey(&self) -> u32 {
        self.0.lkey()
    }
    fn rkey(&self) -> u32 {
        self.0.rkey()
    }
    fn remote_base(&self) -> u64 {
        self.0.remote_base()
    }
}

pub(crate) struct MrShared {
    pub(crate) pd_id: u64,
    pd: Weak<PdInner>,
    /// Its slot in the software table; `None` for a device's region.
    slot: Option<u32>,
    pub(crate) access: Access,
    /// The key it is named by: its software STag, else the device's rkey (its lkey
    /// when it has no remote rights).
    pub(crate) stag: STag,
    /// False once invalidated (locally, by a peer's Send With Invalidate in a software
    /// provider, or by deregistration).
    pub(crate) valid: AtomicBool,
    /// The device's registration of `mem`, if the PD has a registrar. Declared before
    /// `mem` so that it is dropped (deregistered from the device) first; deregistration
    /// takes it out before the memory, and a local write never moves memory the device
    /// has registered (`Mem::make_mut` refuses copy-on-write then).
    device: Mutex<Option<Box<dyn DeviceRegistration>>>,
    /// How the device knows the region, as registered.
    registered: Registered,
    /// Registered memory. Invariant: its length only changes on deregistration (to 0),
    /// and its address never changes while `device` holds a registration of it.
    pub(crate) mem: Mutex<Mem>,
}

/// A region's memory: owned (and mutable), bytes shared with the consumer
/// ([`ProtectionDomain::register_bytes`]), immutable while shared, or a range lent by a
/// pooled buffer ([`ProtectionDomain::register_pooled`]).
pub(crate) enum Mem {
    Owned(BytesMut),
    Shared(Bytes),
    Pooled(Lent),
}

impl Mem {
    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Mem::Owned(b) => b,
            Mem::Shared(b) => b,
            Mem::Pooled(l) => l.as_slice(),
        }
    }

    /// The bytes, mutably. A shared region first takes its bytes over (without a copy
    /// when no one else holds them, else with one), so a local write never reaches the
    /// consumer's other handles to those bytes.
    ///
    /// Only for regions no device registered (software providers' placement); see
    /// `make_mut_checked`.
    pub(crate) fn make_mut(&mut self) -> &mut [u8] {
        if let Mem::Shared(b) = self {
            let b = std::mem::take(b);
            // COPY: only when a shared region is written locally while its bytes are
            // still held elsewhere (copy on write).
            let owned = b.try_into_mut().unwrap_or_else(|b| BytesMut::from(&b[..]));
            *self = Mem::Owned(owned);
        }
        match self {
            Mem::Owned(b) => b,
            Mem::Pooled(l) => l.as_mut_slice(),
            Mem::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// As `make_mut`; `None` instead of a copy on write when `device_registered` (the
    /// device knows the shared bytes' address, which must stay valid and current).
    fn make_mut_checked(&mut self, device_registered: bool) -> Option<&mut [u8]> {
        if device_registered && matches!(self, Mem::Shared(_)) {
            return None;
        }
        Some(self.make_mut())
    }

    /// Takes the bytes out, leaving an empty region.
    fn take(&mut self) -> Mem {
        std::mem::replace(self, Mem::Owned(BytesMut::new()))
    }
}

impl Drop for MrShared {
    fn drop(&mut self) {
        if let (Some(index), Some(pd)) = (self.slot, self.pd.upgrade()) {
            if let Keys::Software(table) = &pd.keys {
                lock(table).remove(index);
            }
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it; the data
    // (bytes, a table of weak pointers) stays structurally valid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ProtectionDomain {
    /// A protection domain of a device that registers memory itself (a verbs device:
    /// `ibv_alloc_pd`, then `ibv_reg_mr` for each region through `registrar`). Regions
    /// then carry the device's keys ([`MemoryRegion::lkey`], [`MemoryRegion::rkey`]).
    /// (A software provider's protection domain: [`crate::software::SoftwarePd::new`].)
    pub fn with_registrar(
        attributes: DeviceAttributes,
        registrar: Arc<dyn Registrar>,
    ) -> ProtectionDomain {
        ProtectionDomain::new(attributes, Keys::Device(registrar))
    }

    pub(crate) fn new(attributes: DeviceAttributes, keys: Keys) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::new(PdInner {
                id: NEXT_PD_ID.fetch_add(1, Ordering::Relaxed),
                attributes,
                keys,
                device_registrations: AtomicU64::new(0),
                cached_registrations: AtomicU64::new(0),
            }),
        }
    }

    /// The registrar of the device this protection domain belongs to; `None` for a
    /// software provider's. Its provider takes its own protection domain object from
    /// it ([`Registrar::as_any`]).
    pub fn registrar(&self) -> Option<&Arc<dyn Registrar>> {
        match &self.inner.keys {
            Keys::Device(r) => Some(r),
            Keys::Software(_) => None,
        }
    }

    /// How this PD's regions got their device registrations so far.
    pub fn registration_stats(&self) -> RegistrationStats {
        RegistrationStats {
            device: self.inner.device_registrations.load(Ordering::Relaxed),
            cached: self.inner.cached_registrations.load(Ordering::Relaxed),
        }
    }

    /// The device registration a region of `access` rights gets from the cache of
    /// pooled allocations ([`crate::pool`], "Registration cache"): only for local
    /// access (a registration with remote rights is made for one region, one call,
    /// and never kept), and only with a device registrar. `find` looks the cache up,
    /// given a function that registers a whole allocation for local access.
    fn cached(
        &self,
        access: Access,
        find: impl FnOnce(
            &dyn Fn(&[u8]) -> Result<Box<dyn DeviceRegistration>, RegisterError>,
        ) -> Result<Option<Arc<dyn DeviceRegistration>>, RegisterError>,
    ) -> Option<Box<dyn DeviceRegistration>> {
        let r = self.registrar()?;
        if access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE) {
            return None;
        }
        let register = |whole: &[u8]| {
            // SAFETY: the `Registrar` contract, kept by `crate::pool`: `whole` is a
            // pooled allocation that drops this registration before its memory is
            // freed, and whose bytes are written only through ranges lent to one
            // region at a time.
            let reg = unsafe { r.register(whole, Access::LOCAL_WRITE) }?;
            self.inner
                .device_registrations
                .fetch_add(1, Ordering::Relaxed);
            Ok(reg)
        };
        // A cache that cannot register the whole allocation (a device limit, locked
        // memory) leaves the region to register its own range, as without a cache.
        find(&register).ok().flatten().map(|reg| {
            self.inner
                .cached_registrations
                .fetch_add(1, Ordering::Relaxed);
            Box::new(CachedShare(reg)) as Box<dyn DeviceRegistration>
        })
    }

    /// A process-unique id of this PD.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The limits of the device this PD belongs to.
    pub fn attributes(&self) -> DeviceAttributes {
        self.inner.attributes
    }

    /// Whether registering memory here makes it resident: a device registration
    /// (`ibv_reg_mr`) pins every page of the region at once, so a consumer that wants
    /// an unused buffer to cost nothing registers it only when it needs it. The
    /// software table pins nothing: a zeroed region's pages become resident only when
    /// written.
    pub fn pins_memory(&self) -> bool {
        self.registrar().is_some()
    }

    /// Registers `buf` with `access` rights. The region's tagged offsets run from 0 to
    /// `buf.len()`. A software STag has a fresh random key (RFC 8166 §10.2, RFC 5042
    /// §5.2: unpredictable handles); a device draws its own keys.
    ///
    /// Fails as a device does (`ibv_reg_mr`): a region larger than the device's
    /// `max_mr_size`, more regions than its `max_mr` (counted by the software table; a
    /// device refuses them itself, [`RegisterError::Provider`]), or remote write without
    /// local write.
    pub fn register(&self, buf: BytesMut, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.register_mem(Mem::Owned(buf), access)
    }

    /// Registers `buf` without copying it: the region's memory is the consumer's own
    /// bytes (as a verbs provider maps the consumer's pages), immutable while the
    /// consumer holds other handles to them. Meant for regions peers only read (an
    /// RDMA Read's data source): a provider can send from them without copying
    /// ([`crate::software::ResolvedRegion::shared_range`]). A local write to such a
    /// region ([`MemoryRegion::with_mut`], [`MemoryRegion::write`], a software
    /// provider's placement) first gives the region a copy of its own, so it never
    /// changes the consumer's bytes.
    ///
    /// Fails as [`ProtectionDomain::register`].
    pub fn register_bytes(
        &self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, RegisterError> {
        self.register_mem(Mem::Shared(buf), access)
    }

    /// The consumer's bytes as a gather element of a Send or RDMA Write: registered as
    /// they are, for local access only ([`ProtectionDomain::register_bytes`]; software
    /// providers send from them without a copy). The registration lives as long as
    /// the work request holds the element.
    pub fn sge(&self, bytes: Bytes) -> Result<crate::LocalSge, RegisterError> {
        self.register_bytes(bytes, Access::NONE)
            .map(crate::LocalSge::whole)
    }

    /// Registers bytes `range` of a pooled buffer, which lends them to the region
    /// alone until it is deregistered ([`MemoryRegion::release`]); the rest of the
    /// buffer stays the consumer's (e.g. room around a chunk). The bytes are not
    /// zeroed: see [`crate::pool`]. Fails as [`ProtectionDomain::register`], or when
    /// the range is out of bounds, handed out or lent already.
    pub fn register_pooled(
        &self,
        buf: &PooledBuffer,
        range: std::ops::Range<usize>,
        access: Access,
    ) -> Result<MemoryRegion, RegisterError> {
        // Before lending: the cache registers the whole allocation, which it may only
        // borrow while nothing of it is lent.
        let pd_id = self.inner.id;
        let cached = self.cached(access, |register| buf.local_registration(pd_id, register));
        let lent = buf.lend(range).map_err(|e: BufferError| {
            RegisterError::Provider(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
        })?;
        self.register_with(Mem::Pooled(lent), access, cached)
    }

    fn register_mem(&self, mem: Mem, access: Access) -> Result<MemoryRegion, RegisterError> {
        let cached = match &mem {
            // Shared bytes are read-only to a device: gather elements only.
            Mem::Shared(b) if access == Access::NONE => {
                let pd_id = self.inner.id;
                self.cached(access, |register| {
                    pool::local_registration_of(b, pd_id, register)
                })
            }
            _ => None,
        };
        self.register_with(mem, access, cached)
    }

    /// Registers `mem`; with the device, through `cached` (a share of a pooled
    /// allocation's registration, for local access) or else a registration of its own.
    fn register_with(
        &self,
        mem: Mem,
        access: Access,
        cached: Option<Box<dyn DeviceRegistration>>,
    ) -> Result<MemoryRegion, RegisterError> {
        let attrs = self.inner.attributes;
        // Verbs (`ibv_reg_mr`): "If IBV_ACCESS_REMOTE_WRITE is set, then
        // IBV_ACCESS_LOCAL_WRITE must be set too."
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
            return Err(RegisterError::InvalidAccess(
                "remote write needs local write",
            ));
        }
        let len = mem.len() as u64;
        if len > attrs.max_mr_size {
            return Err(RegisterError::TooLarge {
                len,
                max: attrs.max_mr_size,
            });
        }
        let region = |mem, slot, stag, device, registered| {
            Arc::new(MrShared {
                pd_id: self.inner.id,
                pd: Arc::downgrade(&self.inner),
                slot,
                access,
                stag,
                valid: AtomicBool::new(true),
                device: Mutex::new(device),
                registered,
                mem: Mutex::new(mem),
            })
        };
        let shared = match &self.inner.keys {
            Keys::Software(table) => {
                let mut t = lock(table);
                let max = attrs.max_mr.min(1 << STag::INDEX_BITS);
                if t.live() >= max as usize {
                    return Err(RegisterError::TooMany { max });
                }
                let (index, stag) = t.reserve();
                let shared = region(mem, Some(index), stag, None, Registered::Software);
                t.fill(index, &shared);
                shared
            }
            Keys::Device(r) => {
                let writable =
                    access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE);
                if writable && matches!(mem, Mem::Shared(_)) {
                    return Err(RegisterError::InvalidAccess(
                        "the consumer's shared bytes are immutable to a device",
                    ));
                }
                let (device, registered) = match cached {
                    // A share of the pooled allocation's own registration (`cached`).
                    Some(share) => (share, Registered::Cached),
                    None => {
                        // SAFETY: the `Registrar` contract, kept by `MrShared`: the
                        // memory moves into the region created below and stays at this
                        // address (an owned buffer is never grown, shared bytes are
                        // never copied on write while registered, a pooled range is
                        // lent to the region alone) until the region drops its device
                        // registration, which it does before its memory (field order,
                        // `deregister`, `release`); shared bytes get no write right
                        // (checked above).
                        let reg = unsafe { r.register(mem.as_slice(), access) }?;
                        self.inner
                            .device_registrations
                            .fetch_add(1, Ordering::Relaxed);
                        (reg, Registered::Device)
                    }
                };
                let remote =
                    access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE);
                let stag = STag(if remote { device.rkey() } else { device.lkey() });
                region(mem, None, stag, Some(device), registered)
            }
        };
        Ok(MemoryRegion { shared })
    }

    /// Registers a zeroed region of `len` bytes.
    pub fn register_zeroed(
        &self,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion, RegisterError> {
        self.register(BytesMut::zeroed(len), access)
    }
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("id", &self.inner.id)
            .finish()
    }
}

/// A registered memory region. Clones share the registration; it is deregistered
/// when the last handle (including software providers' transient
/// [`crate::software::ResolvedRegion`]s) drops,
/// or at once by [`MemoryRegion::deregister`].
#[derive(Clone)]
pub struct MemoryRegion {
    pub(crate) shared: Arc<MrShared>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("stag", &self.stag())
            .field("access", &self.shared.access)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl MemoryRegion {
    /// The key this region is named by: in a software provider's table one STag is
    /// both the local and the remote key, as on iWARP; a device's region is named by
    /// its rkey (its lkey without remote rights). Consumers name the key they mean
    /// ([`MemoryRegion::lkey`], [`MemoryRegion::rkey`]).
    pub fn stag(&self) -> STag {
        self.shared.stag
    }

    /// The local key: what gather/scatter lists name this region by (verbs
    /// `ibv_mr.lkey`).
    pub fn lkey(&self) -> STag {
        match &*lock(&self.shared.device) {
            Some(d) => STag(d.lkey()),
            None => self.stag(),
        }
    }

    /// The remote key a peer names this region by in chunk segments (verbs
    /// `ibv_mr.rkey`); `None` for a region registered without remote rights, which no
    /// peer can reach.
    pub fn rkey(&self) -> Option<STag> {
        let remote = self.shared.access.contains(Access::REMOTE_READ)
            || self.shared.access.contains(Access::REMOTE_WRITE);
        if !remote {
            return None;
        }
        Some(match &*lock(&self.shared.device) {
            Some(d) => STag(d.rkey()),
            None => self.stag(),
        })
    }

    /// The tagged offset (iWARP) or virtual address (InfiniBand, RoCE) by which a
    /// peer names byte `offset` of this region in a chunk segment or an RDMA
    /// Read/Write: `offset` itself for this crate's software table (zero-based, as
    /// iWARP STags are), the byte's address for a device that registers by address
    /// (verbs `ibv_reg_mr`; [`DeviceRegistration::remote_base`]).
    pub fn remote_offset(&self, offset: usize) -> u64 {
        let base = lock(&self.shared.device)
            .as_ref()
            .map_or(0, |d| d.remote_base());
        base.wrapping_add(offset as u64)
    }

    /// True while the device holds a registration of this region's memory.
    fn device_registered(&self) -> bool {
        lock(&self.shared.device).is_some()
    }

    /// Drops the device's registration (deregisters it from the device) before the
    /// memory is taken out.
    fn drop_device_registration(&self) {
        drop(lock(&self.shared.device).take());
    }

    /// The access rights given at registration.
    pub fn access(&self) -> Access {
        self.shared.access
    }

    /// How the device knows this region (as registered; deregistration aside).
    pub fn registered(&self) -> Registered {
        self.shared.registered
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        lock(&self.shared.mem).len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of the owning PD.
    pub fn pd_id(&self) -> u64 {
        self.shared.pd_id
    }

    /// False after local or remote invalidation.
    pub fn is_valid(&self) -> bool {
        self.shared.valid.load(Ordering::Acquire)
    }

    /// Local invalidation: the STag stops working for remote access at once.
    pub fn invalidate(&self) {
        self.shared.valid.store(false, Ordering::Release);
    }

    /// Runs `f` over the region's bytes.
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(lock(&self.shared.mem).as_slice())
    }

    /// Runs `f` over the region's bytes, mutably (local CPU access; a region registered
    /// by [`ProtectionDomain::register_bytes`] is copied first).
    ///
    /// `None` for the consumer's shared bytes registered with a device
    /// ([`ProtectionDomain::with_registrar`]): a copy on write would move memory the
    /// device knows.
    pub fn with_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        let device = self.device_registered();
        lock(&self.shared.mem).make_mut_checked(device).map(f)
    }

    /// Copies `len` bytes at `offset` out. Returns `None` when out of bounds.
    pub fn read(&self, offset: usize, len: usize) -> Option<Bytes> {
        let m = lock(&self.shared.mem);
        let end = offset.checked_add(len)?;
        // COPY: explicit local read by the consumer.
        m.as_slice().get(offset..end).map(Bytes::copy_from_slice)
    }

    /// Copies `data` in at `offset`. Returns `false` when out of bounds, or for shared
    /// bytes registered with a device (as [`MemoryRegion::with_mut`]).
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        let device = self.device_registered();
        let mut m = lock(&self.shared.mem);
        match offset.checked_add(data.len()) {
            Some(end) if end <= m.len() => match m.make_mut_checked(device) {
                Some(b) => {
                    b[offset..end].copy_from_slice(data);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Deregisters at once and hands the buffer back. Other handles to this region then
    /// see an invalid, empty region. (A region registered by
    /// [`ProtectionDomain::register_bytes`] whose bytes are still held elsewhere is
    /// copied; [`MemoryRegion::deregister_bytes`] never copies.)
    pub fn deregister(self) -> BytesMut {
        self.shared.valid.store(false, Ordering::Release);
        self.drop_device_registration();
        match lock(&self.shared.mem).take() {
            Mem::Owned(b) => b,
            // COPY: only when the shared bytes are still held elsewhere.
            Mem::Shared(b) => b.try_into_mut().unwrap_or_else(|b| BytesMut::from(&b[..])),
            // COPY: a pooled region's bytes stay in their buffer; use `release`.
            Mem::Pooled(l) => BytesMut::from(l.as_slice()),
        }
    }

    /// Deregisters at once: other handles to this region then see an invalid, empty
    /// region, and a pooled region's range goes back to its buffer (where the
    /// consumer can freeze it, [`PooledBuffer::freeze`]).
    pub fn release(self) {
        self.shared.valid.store(false, Ordering::Release);
        self.drop_device_registration();
        drop(lock(&self.shared.mem).take());
    }

    /// As [`MemoryRegion::deregister`], handing the bytes back frozen, without a copy.
    pub fn deregister_bytes(self) -> Bytes {
        self.shared.valid.store(false, Ordering::Release);
        self.drop_device_registration();
        match lock(&self.shared.mem).take() {
            Mem::Owned(b) => b.freeze(),
            Mem::Shared(b) => b,
            // COPY: a pooled region's bytes stay in their buffer; use `release`.
            Mem::Pooled(l) => Bytes::copy_from_slice(l.as_slice()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{DeviceRegistration, Registrar};
    use crate::software::SoftwarePd;
    use std::sync::atomic::AtomicU32;
    use std::sync::atomic::AtomicUsize;

    /// A device registrar that counts its live registrations and what they covered.
    #[derive(Default)]
    struct Fake {
        live: Arc<AtomicUsize>,
        next: AtomicU32,
        /// (address, length, access) of each registration made.
        made: Mutex<Vec<(usize, usize, Access)>>,
    }
    struct Reg {
        key: u32,
        live: Arc<AtomicUsize>,
    }
    impl DeviceRegistration for Reg {
        fn lkey(&self) -> u32 {
            self.key
        }
        fn rkey(&self) -> u32 {
            self.key | 0x8000_0000
        }
        fn remote_base(&self) -> u64 {
            0x1000 * u64::from(self.key)
        }
    }
    impl Drop for Reg {
        fn drop(&mut self) {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }
    impl Registrar for Fake {
        unsafe fn register(
            &self,
            mem: &[u8],
            access: Access,
        ) -> Result<Box<dyn DeviceRegistration>, RegisterError> {
            assert!(!mem.is_empty());
            lock(&self.made).push((mem.as_ptr() as usize, mem.len(), access));
            self.live.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(Reg {
                key: self.next.fetch_add(1, Ordering::SeqCst) + 1,
                live: self.live.clone(),
            }))
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn registration_fails_as_a_device_does() {
        let attrs = DeviceAttributes {
            max_mr_size: 16,
            max_mr: 2,
            ..DeviceAttributes::SOFTWARE
        };
        let pd = SoftwarePd::new(attrs);
        assert!(matches!(
            pd.register_zeroed(8, Access::REMOTE_WRITE),
            Err(RegisterError::InvalidAccess(_))
        ));
        assert!(matches!(
            pd.register_zeroed(17, Access::NONE),
            Err(RegisterError::TooLarge { len: 17, max: 16 })
        ));
        let a = pd.register_zeroed(16, Access::NONE).unwrap();
        let b = pd.register_zeroed(1, Access::REMOTE_READ).unwrap();
        assert!(matches!(
            pd.register_zeroed(1, Access::NONE),
            Err(RegisterError::TooMany { max: 2 })
        ));
        // Keys: a local-only region has no remote key.
        assert_eq!((a.rkey(), a.lkey()), (None, a.stag()));
        assert_eq!(b.rkey(), Some(b.stag()));
        drop(a);
        assert!(pd.register_zeroed(1, Access::NONE).is_ok());
    }

    /// A device that registers memory itself: its keys on the regions, its
    /// registration gone before the memory is handed back, and no copy on write of
    /// shared bytes it registered.
    #[test]
    fn a_device_registrar_gives_its_keys_and_deregisters_first() {
        let fake = Arc::new(Fake::default());
        let live = fake.live.clone();
        let pd = ProtectionDomain::with_registrar(DeviceAttributes::SOFTWARE, fake);
        assert!(SoftwarePd::of(&pd).is_none(), "no STag table of its own");
        let back = pd
            .registrar()
            .map(|r| r.as_any().downcast_ref::<Fake>().is_some());
        assert_eq!(back, Some(true), "its provider finds its own registrar");
        assert!(SoftwarePd::new(DeviceAttributes::SOFTWARE)
            .registrar()
            .is_none());
        let owned = pd
            .register(BytesMut::from(&b"abc"[..]), Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!((owned.lkey(), owned.rkey()), (STag(1), None));
        assert_eq!(owned.stag(), STag(1), "named by its lkey");
        assert!(owned.write(0, b"A"));
        let data = Bytes::from_static(b"shared");
        let shared = pd
            .register_bytes(data.clone(), Access::REMOTE_READ)
            .unwrap();
        assert_eq!(shared.rkey(), Some(STag(0x8000_0002)));
        assert_eq!(shared.stag(), STag(0x8000_0002), "named by its rkey");
        // Addressed as the device says.
        assert_eq!(shared.remote_offset(5), 0x2005);
        let soft = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let zero_based = soft.register_zeroed(8, Access::NONE).unwrap();
        assert_eq!(zero_based.remote_offset(5), 5);
        assert_eq!(live.load(Ordering::SeqCst), 2);
        // No copy on write of bytes the device knows.
        assert!(!shared.write(0, b"x"));
        assert_eq!(shared.with_mut(|b| b[0] = b'x'), None);
        assert_eq!(shared.deregister_bytes(), data);
        assert_eq!(owned.deregister(), BytesMut::from(&b"Abc"[..]));
        assert_eq!(live.load(Ordering::SeqCst), 0);
        // Dropped without deregistering: the registration goes too.
        drop(pd.register_zeroed(8, Access::NONE).unwrap());
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }

    /// The registration cache of pooled allocations (`crate::pool`): a region for local
    /// access shares its allocation's one device registration, which outlives the
    /// region and the buffer's idle time in the pool and goes before the memory does;
    /// regions with remote rights always get a registration of their own.
    #[test]
    fn pooled_allocations_keep_one_local_registration_per_pd() {
        let fake = Arc::new(Fake::default());
        let live = fake.live.clone();
        let pd = ProtectionDomain::with_registrar(DeviceAttributes::SOFTWARE, fake.clone());
        let pool = crate::BufferPool::new(1 << 20);

        // An RDMA Read sink: the whole allocation is registered once, for local write.
        let buf = pool.get(1000);
        let base = buf.addr(0).unwrap() as usize;
        let sink = pd
            .register_pooled(&buf, 100..600, Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(lock(&fake.made)[0], (base, 64 * 1024, Access::LOCAL_WRITE));
        assert_eq!(sink.lkey(), STag(1));
        assert_eq!(sink.rkey(), None);
        sink.release();
        assert_eq!(live.load(Ordering::SeqCst), 1, "kept with the allocation");

        // Its data frozen and sent: the gather element shares the same registration.
        let data = buf.freeze(100..600).unwrap();
        let sge = pd.sge(data.slice(10..20)).unwrap();
        assert_eq!(sge.mr.lkey(), STag(1));
        drop((sge, data, buf));
        assert_eq!(pool.stats().idle_bytes, 64 * 1024);
        assert_eq!(
            live.load(Ordering::SeqCst),
            1,
            "idle in the pool, still registered"
        );

        // Reused: no new registration.
        let again = pool.get(6000);
        assert_eq!(again.addr(0).unwrap() as usize, base);
        let sink = pd
            .register_pooled(&again, 0..2000, Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(sink.lkey(), STag(1));
        assert_eq!(
            pd.registration_stats(),
            RegistrationStats {
                device: 1,
                cached: 3
            }
        );

        // Remote rights: a registration of the region's own, gone with the region.
        let chunk = pd
            .register_pooled(
                &again,
                4000..5000,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .unwrap();
        assert_eq!(chunk.rkey(), Some(STag(0x8000_0002)));
        assert_eq!(
            lock(&fake.made)[1],
            (
                base + 4000,
                1000,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE
            )
        );
        chunk.release();
        assert_eq!(live.load(Ordering::SeqCst), 1);

        // Another PD keeps a registration of its own (here of a second allocation).
        let other = ProtectionDomain::with_registrar(DeviceAttributes::SOFTWARE, fake.clone());
        let b = pool.get(10);
        let r = other.register_pooled(&b, 0..10, Access::NONE).unwrap();
        assert_eq!(r.lkey(), STag(3));
        assert_eq!(live.load(Ordering::SeqCst), 2);
        assert_eq!(other.registration_stats().device, 1);

        // Bytes that are not from a pool, or not wholly inside one allocation:
        // registered as they are.
        let plain = pd.sge(Bytes::from(vec![1u8; 100])).unwrap();
        assert_eq!(plain.mr.lkey(), STag(4));
        drop(plain);
        assert_eq!(pd.registration_stats().device, 3);

        // The pool lets its allocations go: registrations first, then the memory.
        drop((sink, again, r, b));
        assert_eq!(live.load(Ordering::SeqCst), 2);
        assert_eq!(pool.release_idle(), 2 * 64 * 1024);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }

    /// While part of a buffer is lent to a region, the cache cannot borrow the whole
    /// allocation to register it: the next region registers its own range.
    #[test]
    fn a_buffer_with_a_lent_range_and_no_cached_registration_registers_the_range() {
        let fake = Arc::new(Fake::default());
        let soft = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let pd = ProtectionDomain::with_registrar(DeviceAttributes::SOFTWARE, fake.clone());
        let pool = crate::BufferPool::new(1 << 20);
        let buf = pool.get(1000);
        let base = buf.addr(0).unwrap() as usize;
        let _software = soft
            .register_pooled(&buf, 0..10, Access::LOCAL_WRITE)
            .unwrap();
        let r = pd
            .register_pooled(&buf, 10..20, Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(lock(&fake.made)[0], (base + 10, 10, Access::LOCAL_WRITE));
        assert_eq!(pd.registration_stats().cached, 0);
        drop(r);
        assert_eq!(fake.live.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn deregister_returns_the_buffer() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let mr = pd
            .register(BytesMut::from(&b"hello"[..]), Access::LOCAL_WRITE)
            .unwrap();
        assert!(mr.write(1, b"EL"));
        assert_eq!(&mr.deregister()[..], b"hELlo");
    }

    #[test]
    fn deregister_of_a_shared_region_gives_bytes_back() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        // Still held by the caller: a copy.
        let data = Bytes::from(b"abc".to_vec());
        let mr = pd
            .register_bytes(data.clone(), Access::REMOTE_READ)
            .unwrap();
        assert_eq!(&mr.deregister()[..], b"abc");
        // Held by the region alone: handed back as is.
        let v = b"xyz".to_vec();
        let ptr = v.as_ptr();
        let mr = pd
            .register_bytes(Bytes::from(v), Access::REMOTE_READ)
            .unwrap();
        let back = mr.deregister();
        assert_eq!((&back[..], back.as_ptr()), (&b"xyz"[..], ptr));
    }
}

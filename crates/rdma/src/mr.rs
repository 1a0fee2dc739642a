//! Protection domains and memory regions, with the software registration table.
//!
//! Every remote access is resolved through [`ProtectionDomain::resolve`], which checks
//! in this order: the STag names a live registration (index and key match, not
//! invalidated), the region belongs to this PD, the requested rights are granted, and
//! `[offset, offset + len)` lies inside the region without wrapping.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::{Bytes, BytesMut};
use rand::Rng;

use crate::access::{Access, STag};
use crate::device::{DeviceAttributes, DeviceRegistration, RegisterError, Registrar};
use crate::pool::{self, BufferError, Lent, PooledBuffer};

/// Why a remote (or local) access to a memory region was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No valid registration has this STag (unknown index, wrong key, or invalidated).
    #[error("invalid STag")]
    InvalidStag,
    /// The region exists but belongs to another protection domain.
    #[error("STag not associated with this protection domain")]
    NotAssociated,
    /// The access lies (partly) outside the region.
    #[error("base or bounds violation")]
    BaseBounds,
    /// The offset plus length wraps the 64-bit tagged offset space.
    #[error("tagged offset wrap")]
    ToWrap,
    /// The region lacks the rights the access needs.
    #[error("access rights violation")]
    AccessRights,
}

static NEXT_PD_ID: AtomicU64 = AtomicU64::new(1);

/// A protection domain: a namespace of memory regions and the queue pairs that may
/// use them. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

struct PdInner {
    id: u64,
    /// The device's limits, checked at registration.
    attributes: DeviceAttributes,
    /// The device that registers memory too (a verbs device); `None` for software.
    registrar: Option<Arc<dyn Registrar>>,
    table: Mutex<Table>,
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
    /// In this crate's software table only (a software provider).
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

#[derive(Default)]
struct Table {
    slots: Vec<Option<Weak<MrShared>>>,
    free: Vec<u32>,
}

impl Table {
    fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

struct MrShared {
    pd_id: u64,
    pd: Weak<PdInner>,
    index: u32,
    access: Access,
    stag: AtomicU32,
    valid: AtomicBool,
    /// The device's registration of `mem`, if the PD has a registrar. Declared before
    /// `mem` so that it is dropped (deregistered from the device) first; deregistration
    /// takes it out before the memory, and a local write never moves memory the device
    /// has registered (`Mem::make_mut` refuses copy-on-write then).
    device: Mutex<Option<Box<dyn DeviceRegistration>>>,
    /// How the device knows the region, as registered.
    registered: Registered,
    /// Registered memory. Invariant: its length only changes on deregistration (to 0),
    /// and its address never changes while `device` holds a registration of it.
    mem: Mutex<Mem>,
}

/// A region's memory: owned (and mutable), bytes shared with the consumer
/// ([`ProtectionDomain::register_bytes`]), immutable while shared, or a range lent by a
/// pooled buffer ([`ProtectionDomain::register_pooled`]).
enum Mem {
    Owned(BytesMut),
    Shared(Bytes),
    Pooled(Lent),
}

impl Mem {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn as_slice(&self) -> &[u8] {
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
    fn make_mut(&mut self) -> &mut [u8] {
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
        if let Some(pd) = self.pd.upgrade() {
            let mut t = lock(&pd.table);
            if let Some(slot) = t.slots.get_mut(self.index as usize) {
                *slot = None;
                t.free.push(self.index);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it; the data
    // (bytes, a table of weak pointers) stays structurally valid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn random_key() -> u32 {
    rand::thread_rng().gen_range(0..(1u32 << STag::KEY_BITS))
}

impl ProtectionDomain {
    /// A protection domain of this crate's software registration table, limited by
    /// `attributes`: what a software provider's [`crate::Device::alloc_pd`] returns
    /// ([`crate::SoftwareDevice`]). Consumers get protection domains from a device.
    pub fn software(attributes: DeviceAttributes) -> ProtectionDomain {
        ProtectionDomain::new(attributes, None)
    }

    /// A protection domain of a device that registers memory itself (a verbs device:
    /// `ibv_alloc_pd`, then `ibv_reg_mr` for each region through `registrar`). Regions
    /// then carry the device's keys ([`MemoryRegion::lkey`], [`MemoryRegion::rkey`]).
    pub fn with_registrar(
        attributes: DeviceAttributes,
        registrar: Arc<dyn Registrar>,
    ) -> ProtectionDomain {
        ProtectionDomain::new(attributes, Some(registrar))
    }

    fn new(
        attributes: DeviceAttributes,
        registrar: Option<Arc<dyn Registrar>>,
    ) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::new(PdInner {
                id: NEXT_PD_ID.fetch_add(1, Ordering::Relaxed),
                attributes,
                registrar,
                table: Mutex::new(Table::default()),
                device_registrations: AtomicU64::new(0),
                cached_registrations: AtomicU64::new(0),
            }),
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
        let r = self.inner.registrar.as_ref()?;
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
        self.inner.registrar.is_some()
    }

    /// Registers `buf` with `access` rights. The region's tagged offsets run from 0 to
    /// `buf.len()`. The STag has a fresh random key.
    ///
    /// Fails as a device does (`ibv_reg_mr`): a region larger than the device's
    /// `max_mr_size`, more regions than its `max_mr`, or remote write without local
    /// write.
    pub fn register(&self, buf: BytesMut, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.register_mem(Mem::Owned(buf), access)
    }

    /// Registers `buf` without copying it: the region's memory is the consumer's own
    /// bytes (as a verbs provider maps the consumer's pages), immutable while the
    /// consumer holds other handles to them. Meant for regions peers only read (an
    /// RDMA Read's data source): a provider can send from them without copying
    /// ([`ResolvedRegion::shared_range`]). A local write to such a region
    /// ([`MemoryRegion::with_mut`], [`MemoryRegion::write`],
    /// [`ResolvedRegion::place`], [`ResolvedRegion::with_range_mut`]) first gives the
    /// region a copy of its own, so it never changes the consumer's bytes.
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
        let max = attrs.max_mr.min(1 << STag::INDEX_BITS);
        // The device registers first, outside the table's lock (a system call); a
        // registration refused below is dropped, which deregisters it.
        let registered = match (&self.inner.registrar, &cached) {
            (None, _) => Registered::Software,
            (Some(_), Some(_)) => Registered::Cached,
            (Some(_), None) => Registered::Device,
        };
        let device = match &self.inner.registrar {
            None => None,
            Some(r) => {
                let writable =
                    access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE);
                if writable && matches!(mem, Mem::Shared(_)) {
                    return Err(RegisterError::InvalidAccess(
                        "the consumer's shared bytes are immutable to a device",
                    ));
                }
                match cached {
                    // A share of the pooled allocation's own registration (`cached`).
                    Some(share) => Some(share),
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
                        Some(reg)
                    }
                }
            }
        };
        let mut t = lock(&self.inner.table);
        if t.live() >= max as usize {
            return Err(RegisterError::TooMany { max });
        }
        let index = match t.free.pop() {
            Some(i) => i,
            None => {
                let i = t.slots.len() as u32;
                t.slots.push(None);
                i
            }
        };
        let shared = Arc::new(MrShared {
            pd_id: self.inner.id,
            pd: Arc::downgrade(&self.inner),
            index,
            access,
            stag: AtomicU32::new(STag::new(index, random_key()).0),
            valid: AtomicBool::new(true),
            device: Mutex::new(device),
            registered,
            mem: Mutex::new(mem),
        });
        t.slots[index as usize] = Some(Arc::downgrade(&shared));
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

    fn lookup(&self, stag: STag) -> Result<Arc<MrShared>, AccessError> {
        let t = lock(&self.inner.table);
        let shared = t
            .slots
            .get(stag.index() as usize)
            .and_then(|s| s.as_ref())
            .and_then(Weak::upgrade)
            .ok_or(AccessError::InvalidStag)?;
        drop(t);
        if shared.stag.load(Ordering::Acquire) != stag.0 || !shared.valid.load(Ordering::Acquire) {
            return Err(AccessError::InvalidStag);
        }
        Ok(shared)
    }

    /// Resolves a remote access of `len` bytes at tagged offset `offset` needing
    /// `needed` rights. See the module doc for the order of checks.
    pub fn resolve(
        &self,
        stag: STag,
        offset: u64,
        len: u64,
        needed: Access,
    ) -> Result<ResolvedRegion, AccessError> {
        let shared = self.lookup(stag)?;
        if shared.pd_id != self.inner.id {
            return Err(AccessError::NotAssociated);
        }
        if !shared.access.contains(needed) {
            return Err(AccessError::AccessRights);
        }
        let end = offset.checked_add(len).ok_or(AccessError::ToWrap)?;
        let region_len = lock(&shared.mem).len() as u64;
        if end > region_len {
            return Err(AccessError::BaseBounds);
        }
        Ok(ResolvedRegion { shared })
    }

    /// Remote invalidation (Send with Invalidate): invalidates the region named by
    /// `stag` if it is a live registration of this PD.
    pub fn invalidate(&self, stag: STag) -> Result<(), AccessError> {
        let shared = self.lookup(stag)?;
        if shared.pd_id != self.inner.id {
            return Err(AccessError::NotAssociated);
        }
        shared.valid.store(false, Ordering::Release);
        Ok(())
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
/// when the last handle (including providers' transient [`ResolvedRegion`]s) drops,
/// or at once by [`MemoryRegion::deregister`].
#[derive(Clone)]
pub struct MemoryRegion {
    shared: Arc<MrShared>,
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
    /// The current STag (changes on [`MemoryRegion::rekey`]). In this crate's software
    /// table one STag is both the local and the remote key, as on iWARP; consumers
    /// name the key they mean ([`MemoryRegion::lkey`], [`MemoryRegion::rkey`]).
    pub fn stag(&self) -> STag {
        STag(self.shared.stag.load(Ordering::Acquire))
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

    /// Re-registration (as after fast-register): a fresh random key, valid again.
    /// Returns the new STag; the old one no longer resolves.
    pub fn rekey(&self) -> STag {
        let old = self.stag();
        let mut key = random_key();
        if key == old.key() {
            key = (key + 1) & ((1 << STag::KEY_BITS) - 1);
        }
        let stag = STag::new(old.index(), key);
        self.shared.stag.store(stag.0, Ordering::Release);
        self.shared.valid.store(true, Ordering::Release);
        stag
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

    /// This region as a provider sees it after a local (lkey) check.
    pub fn resolved(&self) -> ResolvedRegion {
        ResolvedRegion {
            shared: self.shared.clone(),
        }
    }
}

/// A region found by [`ProtectionDomain::resolve`], for providers to place data into
/// or copy data out of. Offsets are region offsets (tagged offset = region offset).
#[derive(Clone)]
pub struct ResolvedRegion {
    shared: Arc<MrShared>,
}

impl ResolvedRegion {
    /// Copies `data` into the region at `offset`. Fails with `BaseBounds` when the
    /// region shrank (deregistered) since it was resolved.
    pub fn place(&self, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        let mut m = lock(&self.shared.mem);
        let start = usize::try_from(offset).map_err(|_| AccessError::BaseBounds)?;
        let end = start
            .checked_add(data.len())
            .ok_or(AccessError::BaseBounds)?;
        if end > m.len() {
            return Err(AccessError::BaseBounds);
        }
        let dst = &mut m.make_mut()[start..end];
        // COPY: tagged/untagged placement from the receive buffer into registered memory.
        dst.copy_from_slice(data);
        Ok(())
    }

    /// Runs `f` over `len` bytes of the region at `offset`, mutably: a provider
    /// reading from its transport straight into registered memory (no copy). The
    /// region lock is held while `f` runs; `f` must not block.
    pub fn with_range_mut<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, AccessError> {
        let mut m = lock(&self.shared.mem);
        let start = usize::try_from(offset).map_err(|_| AccessError::BaseBounds)?;
        let end = start.checked_add(len).ok_or(AccessError::BaseBounds)?;
        if end > m.len() {
            return Err(AccessError::BaseBounds);
        }
        Ok(f(&mut m.make_mut()[start..end]))
    }

    /// Copies `len` bytes at `offset` out into `out`.
    pub fn copy_out(&self, offset: u64, len: usize, out: &mut Vec<u8>) -> Result<(), AccessError> {
        let m = lock(&self.shared.mem);
        let start = usize::try_from(offset).map_err(|_| AccessError::BaseBounds)?;
        let end = start.checked_add(len).ok_or(AccessError::BaseBounds)?;
        let src = m
            .as_slice()
            .get(start..end)
            .ok_or(AccessError::BaseBounds)?;
        // COPY: region bytes into an outgoing FPDU (Read Response, local SGE).
        out.extend_from_slice(src);
        Ok(())
    }

    /// `len` bytes at `offset` without a copy, when the region was registered by
    /// [`ProtectionDomain::register_bytes`] and still shares those bytes (`Ok(None)`
    /// for any other region: use [`ResolvedRegion::copy_out`]). The slice keeps the
    /// bytes alive after the region is deregistered; like `copy_out`, this checks
    /// bounds (a deregistered region is empty), not validity.
    pub fn shared_range(&self, offset: u64, len: usize) -> Result<Option<Bytes>, AccessError> {
        let m = lock(&self.shared.mem);
        let start = usize::try_from(offset).map_err(|_| AccessError::BaseBounds)?;
        let end = start.checked_add(len).ok_or(AccessError::BaseBounds)?;
        if end > m.len() {
            return Err(AccessError::BaseBounds);
        }
        Ok(match &*m {
            Mem::Shared(b) => Some(b.slice(start..end)),
            Mem::Owned(_) | Mem::Pooled(_) => None,
        })
    }

    /// Current STag.
    pub fn stag(&self) -> STag {
        STag(self.shared.stag.load(Ordering::Acquire))
    }

    /// Access rights.
    pub fn access(&self) -> Access {
        self.shared.access
    }

    /// Current length.
    pub fn len(&self) -> usize {
        lock(&self.shared.mem).len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The owning PD id.
    pub fn pd_id(&self) -> u64 {
        self.shared.pd_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{DeviceRegistration, Registrar};
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
    }

    #[test]
    fn resolve_checks_rights_bounds_and_keys() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let mr = pd
            .register_zeroed(100, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let s = mr.stag();
        assert!(pd.resolve(s, 0, 100, Access::REMOTE_WRITE).is_ok());
        assert_eq!(
            pd.resolve(s, 1, 100, Access::REMOTE_WRITE).err(),
            Some(AccessError::BaseBounds)
        );
        assert_eq!(
            pd.resolve(s, u64::MAX, 2, Access::REMOTE_WRITE).err(),
            Some(AccessError::ToWrap)
        );
        assert_eq!(
            pd.resolve(s, 0, 1, Access::REMOTE_READ).err(),
            Some(AccessError::AccessRights)
        );
        let wrong_key = STag::new(s.index(), s.key() ^ 1);
        assert_eq!(
            pd.resolve(wrong_key, 0, 1, Access::REMOTE_WRITE).err(),
            Some(AccessError::InvalidStag)
        );
    }

    #[test]
    fn registration_fails_as_a_device_does() {
        let attrs = DeviceAttributes {
            max_mr_size: 16,
            max_mr: 2,
            ..DeviceAttributes::SOFTWARE
        };
        let pd = ProtectionDomain::software(attrs);
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

    #[test]
    fn a_pooled_range_is_the_regions_alone_until_released() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let pool = crate::BufferPool::new(1 << 20);
        let buf = pool.get(100);
        let mr = pd
            .register_pooled(&buf, 10..60, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!(mr.len(), 50);
        let r = pd.resolve(mr.stag(), 0, 50, Access::REMOTE_WRITE).unwrap();
        r.place(5, b"placed").unwrap();
        assert!(pd.register_pooled(&buf, 59..61, Access::NONE).is_err());
        assert!(buf.freeze(10..20).is_err(), "lent: not handed out");
        buf.write(4, b"room").unwrap();
        let stag = mr.stag();
        mr.release();
        assert!(pd.resolve(stag, 0, 1, Access::REMOTE_WRITE).is_err());
        assert_eq!(r.len(), 0, "other handles see an empty region");
        let whole = buf.freeze(4..21).unwrap();
        assert_eq!(&whole[..4], b"room");
        assert_eq!(&whole[11..17], b"placed");
    }

    /// A device that registers memory itself: its keys on the regions, its
    /// registration gone before the memory is handed back, and no copy on write of
    /// shared bytes it registered.
    #[test]
    fn a_device_registrar_gives_its_keys_and_deregisters_first() {
        let fake = Arc::new(Fake::default());
        let live = fake.live.clone();
        let pd = ProtectionDomain::with_registrar(DeviceAttributes::SOFTWARE, fake);
        let owned = pd
            .register(BytesMut::from(&b"abc"[..]), Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!((owned.lkey(), owned.rkey()), (STag(1), None));
        assert!(owned.write(0, b"A"));
        let data = Bytes::from_static(b"shared");
        let shared = pd
            .register_bytes(data.clone(), Access::REMOTE_READ)
            .unwrap();
        assert_eq!(shared.rkey(), Some(STag(0x8000_0002)));
        // Addressed as the device says.
        assert_eq!(shared.remote_offset(5), 0x2005);
        let soft = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
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
        let soft = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
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
    fn other_pd_is_not_associated() {
        let pd1 = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let pd2 = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let mr = pd1.register_zeroed(8, Access::REMOTE_READ).unwrap();
        // pd2's table has no such slot: invalid STag from pd2's point of view.
        assert!(pd2.resolve(mr.stag(), 0, 8, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn invalidate_then_rekey() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let mr = pd.register_zeroed(8, Access::REMOTE_READ).unwrap();
        let s = mr.stag();
        pd.invalidate(s).unwrap();
        assert_eq!(
            pd.resolve(s, 0, 8, Access::REMOTE_READ).err(),
            Some(AccessError::InvalidStag)
        );
        let s2 = mr.rekey();
        assert_ne!(s, s2);
        assert!(pd.resolve(s2, 0, 8, Access::REMOTE_READ).is_ok());
        assert!(pd.resolve(s, 0, 8, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn drop_frees_the_slot() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let mr = pd.register_zeroed(8, Access::REMOTE_READ).unwrap();
        let s = mr.stag();
        drop(mr);
        assert_eq!(
            pd.resolve(s, 0, 1, Access::REMOTE_READ).err(),
            Some(AccessError::InvalidStag)
        );
    }

    #[test]
    fn deregister_returns_the_buffer() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let mr = pd
            .register(BytesMut::from(&b"hello"[..]), Access::LOCAL_WRITE)
            .unwrap();
        assert!(mr.write(1, b"EL"));
        assert_eq!(&mr.deregister()[..], b"hELlo");
    }

    #[test]
    fn shared_region_hands_out_its_bytes_without_a_copy() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let data = Bytes::from(b"0123456789".to_vec());
        let mr = pd
            .register_bytes(data.slice(2..8), Access::REMOTE_READ)
            .unwrap();
        assert_eq!(mr.len(), 6);
        let r = pd.resolve(mr.stag(), 0, 6, Access::REMOTE_READ).unwrap();
        let piece = r.shared_range(1, 4).unwrap().unwrap();
        assert_eq!(&piece[..], b"3456");
        // The very bytes of the caller's buffer, not a copy.
        assert_eq!(piece.as_ptr(), data[3..].as_ptr());
        assert_eq!(r.shared_range(3, 4).err(), Some(AccessError::BaseBounds));
        assert_eq!(
            r.shared_range(u64::MAX, 1).err(),
            Some(AccessError::BaseBounds)
        );
        let mut out = Vec::new();
        r.copy_out(0, 6, &mut out).unwrap();
        assert_eq!(out, b"234567");
        // Deregistered: empty, as for an owned region.
        let back = mr.deregister_bytes();
        assert_eq!(back.as_ptr(), data[2..].as_ptr());
        assert_eq!(r.shared_range(0, 1).err(), Some(AccessError::BaseBounds));
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn owned_region_has_no_shared_range() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let mr = pd
            .register(BytesMut::from(&b"abc"[..]), Access::REMOTE_READ)
            .unwrap();
        let r = pd.resolve(mr.stag(), 0, 3, Access::REMOTE_READ).unwrap();
        assert_eq!(r.shared_range(0, 3), Ok(None));
        assert_eq!(&mr.deregister_bytes()[..], b"abc");
    }

    #[test]
    fn local_writes_to_a_shared_region_never_reach_the_callers_bytes() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
        let data = Bytes::from(b"hello".to_vec());
        let mr = pd
            .register_bytes(data.clone(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        assert!(mr.write(0, b"J"));
        let r = pd.resolve(mr.stag(), 0, 5, Access::REMOTE_WRITE).unwrap();
        r.place(4, b"y").unwrap();
        r.with_range_mut(1, 1, |b| b[0] = b'E').unwrap();
        mr.with_mut(|b| b[2] = b'L');
        // The region took a copy of its own on the first write.
        assert_eq!(r.shared_range(0, 5), Ok(None));
        assert_eq!(&data[..], b"hello");
        assert_eq!(mr.read(0, 5).unwrap(), Bytes::from_static(b"JELly"));
        assert_eq!(&mr.deregister()[..], b"JELly");
        assert_eq!(&data[..], b"hello");
    }

    #[test]
    fn deregister_of_a_shared_region_gives_bytes_back() {
        let pd = ProtectionDomain::software(DeviceAttributes::SOFTWARE);
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

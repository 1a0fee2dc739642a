//! The STag table of software providers (the userspace iWARP provider, the tests'
//! in-memory provider): how a provider that places data itself finds the region a
//! peer's STag names and checks the access.
//!
//! A device that registers memory itself (a verbs NIC, rxe, siw) checks remote
//! accesses in its own tables (the kernel's or the NIC's), so its protection domains
//! have no table here ([`ProtectionDomain::with_registrar`]); only a protection domain
//! of a [`crate::SoftwareDevice`] has one, and a software provider reaches it through
//! [`SoftwarePd`].
//!
//! Every remote access is resolved through [`SoftwarePd::resolve`], which checks in
//! this order: the STag names a live registration (index and key match, not
//! invalidated), the region belongs to this PD, the requested rights are granted, and
//! `[offset, offset + len)` lies inside the region without wrapping (RFC 5042 §5,
//! RFC 5040 §6: the checks behind the DDP and RDMAP error codes the iWARP provider
//! sends).

use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use rand::Rng;

use crate::access::{Access, STag};
use crate::device::DeviceAttributes;
use crate::mr::{lock, Keys, Mem, MemoryRegion, MrShared, ProtectionDomain};

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

/// The slots of a software protection domain's regions: an STag's index names a slot
/// and its key must match the region's (a fresh random key per registration, so a
/// stale or guessed STag does not resolve).
#[derive(Default)]
pub(crate) struct Table {
    slots: Vec<Option<Weak<MrShared>>>,
    free: Vec<u32>,
}

impl Table {
    /// Regions registered and not yet dropped.
    pub(crate) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// A free slot's index, and the STag a region in it is named by.
    pub(crate) fn reserve(&mut self) -> (u32, STag) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        let key = rand::thread_rng().gen_range(0..(1u32 << STag::KEY_BITS));
        (index, STag::new(index, key))
    }

    /// Puts `region` in the slot `reserve` gave.
    pub(crate) fn fill(&mut self, index: u32, region: &Arc<MrShared>) {
        self.slots[index as usize] = Some(Arc::downgrade(region));
    }

    /// Frees the slot of a region being dropped.
    pub(crate) fn remove(&mut self, index: u32) {
        if let Some(slot) = self.slots.get_mut(index as usize) {
            *slot = None;
            self.free.push(index);
        }
    }

    fn get(&self, index: u32) -> Option<Arc<MrShared>> {
        self.slots
            .get(index as usize)?
            .as_ref()
            .and_then(Weak::upgrade)
    }
}

/// A protection domain of a software provider, seen through its STag table: what the
/// provider resolves a peer's tagged accesses and invalidations against. Derefs to
/// the [`ProtectionDomain`] consumers register memory in.
#[derive(Clone, Debug)]
pub struct SoftwarePd {
    /// Invariant: a protection domain of the software table (`Keys::Software`).
    pd: ProtectionDomain,
}

impl SoftwarePd {
    /// A new protection domain of the software table, limited by `attributes`: what
    /// a [`crate::SoftwareDevice`] allocates ([`crate::Device::alloc_pd`]).
    pub fn new(attributes: DeviceAttributes) -> SoftwarePd {
        SoftwarePd {
            pd: ProtectionDomain::new(attributes, Keys::Software(Default::default())),
        }
    }

    /// `pd` as a software provider sees it; `None` for a protection domain of a
    /// device that registers memory itself (another provider's).
    pub fn of(pd: &ProtectionDomain) -> Option<SoftwarePd> {
        matches!(pd.inner.keys, Keys::Software(_)).then(|| SoftwarePd { pd: pd.clone() })
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    fn lookup(&self, stag: STag) -> Result<Arc<MrShared>, AccessError> {
        let Keys::Software(table) = &self.pd.inner.keys else {
            unreachable!("a SoftwarePd's protection domain has the software table")
        };
        let shared = lock(table)
            .get(stag.index())
            .ok_or(AccessError::InvalidStag)?;
        if shared.stag != stag || !shared.valid.load(Ordering::Acquire) {
            return Err(AccessError::InvalidStag);
        }
        if shared.pd_id != self.pd.id() {
            return Err(AccessError::NotAssociated);
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
        shared.valid.store(false, Ordering::Release);
        Ok(())
    }
}

impl Deref for SoftwarePd {
    type Target = ProtectionDomain;
    fn deref(&self) -> &ProtectionDomain {
        &self.pd
    }
}

impl From<SoftwarePd> for ProtectionDomain {
    fn from(pd: SoftwarePd) -> ProtectionDomain {
        pd.pd
    }
}

/// A region found by [`SoftwarePd::resolve`] (or named locally,
/// [`ResolvedRegion::local`]), for a software provider to place data into or copy
/// data out of. Offsets are region offsets (tagged offset = region offset).
#[derive(Clone)]
pub struct ResolvedRegion {
    shared: Arc<MrShared>,
}

impl ResolvedRegion {
    /// `mr` as a provider sees it after its local (lkey) check of a gather or scatter
    /// element.
    pub fn local(mr: &MemoryRegion) -> ResolvedRegion {
        ResolvedRegion {
            shared: mr.shared.clone(),
        }
    }

    /// Copies `data` into the region at `offset`. Fails with `BaseBounds` when the
    /// region shrank (deregistered) since it was resolved.
    pub fn place(&self, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        // COPY: tagged/untagged placement from the receive buffer into registered memory.
        self.with_range_mut(offset, data.len(), |dst| dst.copy_from_slice(data))
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
        let range = bounded(offset, len, m.len())?;
        Ok(f(&mut m.make_mut()[range]))
    }

    /// Copies `len` bytes at `offset` out into `out`.
    pub fn copy_out(&self, offset: u64, len: usize, out: &mut Vec<u8>) -> Result<(), AccessError> {
        let m = lock(&self.shared.mem);
        let range = bounded(offset, len, m.len())?;
        // COPY: region bytes into an outgoing FPDU (Read Response, local SGE).
        out.extend_from_slice(&m.as_slice()[range]);
        Ok(())
    }

    /// `len` bytes at `offset` without a copy, when the region was registered by
    /// [`ProtectionDomain::register_bytes`] and still shares those bytes (`Ok(None)`
    /// for any other region: use [`ResolvedRegion::copy_out`]). The slice keeps the
    /// bytes alive after the region is deregistered; like `copy_out`, this checks
    /// bounds (a deregistered region is empty), not validity.
    pub fn shared_range(&self, offset: u64, len: usize) -> Result<Option<Bytes>, AccessError> {
        let m = lock(&self.shared.mem);
        let range = bounded(offset, len, m.len())?;
        Ok(match &*m {
            Mem::Shared(b) => Some(b.slice(range)),
            Mem::Owned(_) | Mem::Pooled(_) => None,
        })
    }

    /// The STag.
    pub fn stag(&self) -> STag {
        self.shared.stag
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

/// `[offset, offset + len)` as a range of a region of `region_len` bytes.
fn bounded(
    offset: u64,
    len: usize,
    region_len: usize,
) -> Result<std::ops::Range<usize>, AccessError> {
    let start = usize::try_from(offset).map_err(|_| AccessError::BaseBounds)?;
    let end = start.checked_add(len).ok_or(AccessError::BaseBounds)?;
    if end > region_len {
        return Err(AccessError::BaseBounds);
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn resolve_checks_rights_bounds_and_keys() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
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
    fn a_pooled_range_is_the_regions_alone_until_released() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
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

    #[test]
    fn other_pd_is_not_associated() {
        let pd1 = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let pd2 = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let mr = pd1.register_zeroed(8, Access::REMOTE_READ).unwrap();
        // pd2's table has no such slot: invalid STag from pd2's point of view.
        assert!(pd2.resolve(mr.stag(), 0, 8, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn remote_invalidation_stops_the_stag_for_good() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let mr = pd.register_zeroed(8, Access::REMOTE_READ).unwrap();
        let s = mr.stag();
        pd.invalidate(s).unwrap();
        assert_eq!(
            pd.resolve(s, 0, 8, Access::REMOTE_READ).err(),
            Some(AccessError::InvalidStag)
        );
        assert!(!mr.is_valid());
        assert_eq!(pd.invalidate(s), Err(AccessError::InvalidStag));
    }

    #[test]
    fn drop_frees_the_slot() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let mr = pd.register_zeroed(8, Access::REMOTE_READ).unwrap();
        let s = mr.stag();
        drop(mr);
        assert_eq!(
            pd.resolve(s, 0, 1, Access::REMOTE_READ).err(),
            Some(AccessError::InvalidStag)
        );
    }

    #[test]
    fn shared_region_hands_out_its_bytes_without_a_copy() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
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
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
        let mr = pd
            .register(BytesMut::from(&b"abc"[..]), Access::REMOTE_READ)
            .unwrap();
        let r = pd.resolve(mr.stag(), 0, 3, Access::REMOTE_READ).unwrap();
        assert_eq!(r.shared_range(0, 3), Ok(None));
        assert_eq!(&mr.deregister_bytes()[..], b"abc");
    }

    #[test]
    fn local_writes_to_a_shared_region_never_reach_the_callers_bytes() {
        let pd = SoftwarePd::new(DeviceAttributes::SOFTWARE);
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
}

//! The lock table: byte-range locks per file, the queue of blocked requests, and
//! share reservations. Pure data structure: no I/O, no clock, no protocol.
//!
//! Semantics are POSIX `fcntl` record locks, which is what NLM carries (XNFS
//! chapter 10, "NLM ... X/Open CAE file and record locking"):
//! - a lock belongs to an [`Owner`] (client host, `svid`, `oh`); locks of one owner
//!   never conflict with each other;
//! - two locks of different owners conflict when their ranges overlap and at least
//!   one is exclusive;
//! - a new lock of an owner replaces that owner's locks on its range: an overlapping
//!   lock of the other type is cut (split in two if the new range is inside it), one
//!   of the same type overlapping or adjacent is merged (so a shared lock upgrades to
//!   exclusive, or downgrades, in place);
//! - an unlock removes the owner's locks on its range, splitting as needed; unlocking
//!   what is not locked is no error;
//! - blocked requests wait in arrival order; whenever locks go away the queue is
//!   scanned in order and every request that no longer conflicts is granted (the
//!   caller then sends the client its GRANTED callback).

use std::collections::HashMap;

use xdr::Bytes;

/// Who holds a lock: XNFS identifies it by the client host (`caller_name`), the
/// process on it (`svid`) and the owner handle (`oh`); Linux lockd keys on host and
/// `svid`, and the Linux client's `oh` is "svid@nodename", so the triple is the
/// same owner either way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The client's `caller_name`.
    pub host: Bytes,
    /// `svid`.
    pub svid: i32,
    /// `oh`.
    pub oh: Bytes,
}

/// A byte range, both ends included; `end == u64::MAX` is "to the end of the file".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
}

/// Largest offset a lock may start at: Linux's `OFFSET_MAX` (the kernel's `loff_t`
/// is signed); NLM4_FBIG beyond.
pub const OFFSET_MAX: u64 = i64::MAX as u64;

impl Range {
    /// The whole file.
    pub const ALL: Range = Range {
        start: 0,
        end: u64::MAX,
    };

    /// The range of NLM4 `l_offset` / `l_len` (RFC 1813 appendix II: `l_len` 0 is
    /// "to end of file"); `None` (NLM4_FBIG) for an offset past [`OFFSET_MAX`]. A
    /// range whose end would pass `OFFSET_MAX` runs to the end of the file, as Linux
    /// lockd does (`nlm4svc_set_file_lock_range`).
    pub fn from_nlm(offset: u64, len: u64) -> Option<Range> {
        if offset > OFFSET_MAX {
            return None;
        }
        let end = match offset.checked_add(len.wrapping_sub(1)) {
            _ if len == 0 => u64::MAX,
            Some(e) if e <= OFFSET_MAX => e,
            _ => u64::MAX,
        };
        Some(Range { start: offset, end })
    }

    /// Back to (`l_offset`, `l_len`).
    pub fn to_nlm(self) -> (u64, u64) {
        if self.end == u64::MAX {
            (self.start, 0)
        } else {
            (self.start, self.end - self.start + 1)
        }
    }

    fn overlaps(self, o: Range) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    fn touches(self, o: Range) -> bool {
        self.overlaps(o)
            || self.end.checked_add(1) == Some(o.start)
            || o.end.checked_add(1) == Some(self.start)
    }
}

/// A granted lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its owner.
    pub owner: Owner,
    /// Its bytes.
    pub range: Range,
    /// Exclusive (write) or shared (read).
    pub exclusive: bool,
}

impl Held {
    fn conflicts(&self, owner: &Owner, range: Range, exclusive: bool) -> bool {
        &self.owner != owner && self.range.overlaps(range) && (self.exclusive || exclusive)
    }
}

/// A blocked request, with what the caller needs to send its GRANTED callback.
#[derive(Debug, Clone)]
pub struct Waiter<T> {
    /// Who waits.
    pub owner: Owner,
    /// For which bytes.
    pub range: Range,
    /// Exclusive or shared.
    pub exclusive: bool,
    /// The caller's data (the request as received, where to call back).
    pub data: T,
}

/// Why a lock was not granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// Another owner holds this conflicting lock (NLM4_DENIED, or NLM4_BLOCKED).
    Conflict(Held),
    /// A limit would be passed (NLM4_DENIED_NOLOCKS).
    NoLocks,
}

/// Bounds on what clients can make the server keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Locks plus blocked requests of one client host.
    pub per_host: usize,
    /// Locks plus blocked requests in all.
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_host: 65_536,
            total: 1 << 20,
        }
    }
}

#[derive(Debug)]
struct File<T> {
    held: Vec<Held>,
    waiting: Vec<Waiter<T>>,
}

impl<T> Default for File<T> {
    fn default() -> Self {
        File {
            held: Vec::new(),
            waiting: Vec::new(),
        }
    }
}

impl<T> File<T> {
    fn conflict(&self, owner: &Owner, range: Range, exclusive: bool) -> Option<&Held> {
        self.held
            .iter()
            .find(|h| h.conflicts(owner, range, exclusive))
    }

    /// Entries (locks and waiters) per host in this file.
    fn count(&self, host: &[u8]) -> usize {
        self.held.iter().filter(|h| h.owner.host == host).count()
            + self.waiting.iter().filter(|w| w.owner.host == host).count()
    }
}

/// `owner`'s locks in `held` with `range` applied: cut out, then (for a lock, with
/// `exclusive` `Some`) the new lock added, merged with its own kind.
fn apply(held: &mut Vec<Held>, owner: &Owner, range: Range, exclusive: Option<bool>) {
    let mut out = Vec::with_capacity(held.len() + 2);
    let mut new = range;
    for h in held.drain(..) {
        if &h.owner != owner {
            out.push(h);
            continue;
        }
        if exclusive == Some(h.exclusive) && h.range.touches(new) {
            new = Range {
                start: new.start.min(h.range.start),
                end: new.end.max(h.range.end),
            };
            continue;
        }
        if !h.range.overlaps(range) {
            out.push(h);
            continue;
        }
        if h.range.start < range.start {
            out.push(Held {
                range: Range {
                    start: h.range.start,
                    end: range.start - 1,
                },
                ..h.clone()
            });
        }
        if h.range.end > range.end {
            out.push(Held {
                range: Range {
                    start: range.end + 1,
                    end: h.range.end,
                },
                ..h
            });
        }
    }
    if let Some(exclusive) = exclusive {
        out.push(Held {
            owner: owner.clone(),
            range: new,
            exclusive,
        });
    }
    *held = out;
}

/// Every file's locks and blocked requests, keyed by file handle.
#[derive(Debug)]
pub struct LockTable<T> {
    files: HashMap<Bytes, File<T>>,
    per_host: HashMap<Bytes, usize>,
    total: usize,
    limits: Limits,
}

impl<T> LockTable<T> {
    /// An empty table with these limits.
    pub fn new(limits: Limits) -> Self {
        LockTable {
            files: HashMap::new(),
            per_host: HashMap::new(),
            total: 0,
            limits,
        }
    }

    /// The first lock of another owner that conflicts with (`range`, `exclusive`).
    pub fn test(&self, fh: &[u8], owner: &Owner, range: Range, exclusive: bool) -> Option<Held> {
        self.files
            .get(fh)?
            .conflict(owner, range, exclusive)
            .cloned()
    }

    /// Grants the lock, or says why not. A blocked request of the same owner for the
    /// same lock is granted with it (a client polling its blocked LOCK).
    pub fn lock(
        &mut self,
        fh: &Bytes,
        owner: &Owner,
        range: Range,
        exclusive: bool,
    ) -> Result<(), LockError> {
        if let Some(h) = self.test(fh, owner, range, exclusive) {
            return Err(LockError::Conflict(h));
        }
        let file = self.files.entry(fh.clone()).or_default();
        let before = file.count(&owner.host);
        let mut held = file.held.clone();
        apply(&mut held, owner, range, Some(exclusive));
        let same =
            |w: &Waiter<T>| &w.owner == owner && w.range == range && w.exclusive == exclusive;
        let after = held.iter().filter(|h| h.owner.host == owner.host).count()
            + file
                .waiting
                .iter()
                .filter(|w| w.owner.host == owner.host && !same(w))
                .count();
        let host_now = self.per_host.get(&owner.host).copied().unwrap_or(0);
        if after > before
            && (host_now - before + after > self.limits.per_host
                || self.total - before + after > self.limits.total)
        {
            self.cleanup(fh);
            return Err(LockError::NoLocks);
        }
        file.held = held;
        file.waiting.retain(|w| !same(w));
        self.recount(&owner.host, before, after);
        Ok(())
    }

    /// Queues a blocked request (after [`LockTable::lock`] said
    /// [`LockError::Conflict`]). The same owner asking again for the same lock
    /// replaces its queued request in place (keeping its turn).
    pub fn block(&mut self, fh: &Bytes, waiter: Waiter<T>) -> Result<(), LockError> {
        let file = self.files.entry(fh.clone()).or_default();
        if let Some(w) = file.waiting.iter_mut().find(|w| {
            w.owner == waiter.owner && w.range == waiter.range && w.exclusive == waiter.exclusive
        }) {
            *w = waiter;
            return Ok(());
        }
        let host_now = self.per_host.get(&waiter.owner.host).copied().unwrap_or(0);
        if host_now + 1 > self.limits.per_host || self.total + 1 > self.limits.total {
            self.cleanup(fh);
            return Err(LockError::NoLocks);
        }
        let host = waiter.owner.host.clone();
        file.waiting.push(waiter);
        self.recount(&host, 0, 1);
        Ok(())
    }

    /// Removes a queued request; false if there was none (already granted, or never
    /// blocked).
    pub fn cancel(&mut self, fh: &[u8], owner: &Owner, range: Range, exclusive: bool) -> bool {
        let Some(file) = self.files.get_mut(fh) else {
            return false;
        };
        let n = file.waiting.len();
        file.waiting
            .retain(|w| !(&w.owner == owner && w.range == range && w.exclusive == exclusive));
        let removed = n - file.waiting.len();
        if removed > 0 {
            self.recount(&owner.host, removed, 0);
            self.cleanup(fh);
        }
        removed > 0
    }

    /// Releases `owner`'s locks on `range`; returns the blocked requests this granted
    /// (their locks are now held).
    pub fn unlock(&mut self, fh: &Bytes, owner: &Owner, range: Range) -> Vec<(Bytes, Waiter<T>)> {
        let Some(file) = self.files.get_mut(fh) else {
            return Vec::new();
        };
        let before = file.count(&owner.host);
        apply(&mut file.held, owner, range, None);
        let after = file.count(&owner.host);
        self.recount(&owner.host, before, after);
        self.wake(fh)
    }

    /// Grants, in queue order, every blocked request on `fh` that no longer conflicts.
    fn wake(&mut self, fh: &Bytes) -> Vec<(Bytes, Waiter<T>)> {
        let mut granted = Vec::new();
        let Some(file) = self.files.get_mut(fh) else {
            return granted;
        };
        let mut i = 0;
        let mut changes: Vec<(Bytes, usize, usize)> = Vec::new();
        while i < file.waiting.len() {
            let w = &file.waiting[i];
            if file.conflict(&w.owner, w.range, w.exclusive).is_some() {
                i += 1;
                continue;
            }
            let w = file.waiting.remove(i);
            let before = file.count(&w.owner.host) + 1;
            apply(&mut file.held, &w.owner, w.range, Some(w.exclusive));
            let after = file.count(&w.owner.host);
            changes.push((w.owner.host.clone(), before, after));
            granted.push((fh.clone(), w));
        }
        for (host, before, after) in changes {
            self.recount(&host, before, after);
        }
        self.cleanup(fh);
        granted
    }

    /// Drops every lock and blocked request of client `host` (it rebooted: its
    /// SM_NOTIFY, or FREE_ALL); returns the requests of others this granted.
    pub fn drop_host(&mut self, host: &[u8]) -> Vec<(Bytes, Waiter<T>)> {
        let fhs: Vec<Bytes> = self
            .files
            .iter()
            .filter(|(_, f)| f.count(host) > 0)
            .map(|(fh, _)| fh.clone())
            .collect();
        let mut granted = Vec::new();
        for fh in fhs {
            if let Some(file) = self.files.get_mut(&fh) {
                file.held.retain(|h| h.owner.host != host);
                file.waiting.retain(|w| w.owner.host != host);
            }
            granted.extend(self.wake(&fh));
        }
        if let Some(n) = self.per_host.remove(host) {
            self.total -= n;
        }
        granted
    }

    /// The locks held on `fh`.
    pub fn held(&self, fh: &[u8]) -> Vec<Held> {
        self.files
            .get(fh)
            .map(|f| f.held.clone())
            .unwrap_or_default()
    }

    /// Number of blocked requests on `fh`.
    pub fn waiting(&self, fh: &[u8]) -> usize {
        self.files.get(fh).map_or(0, |f| f.waiting.len())
    }

    /// Locks plus blocked requests of `host`.
    pub fn host_entries(&self, host: &[u8]) -> usize {
        self.per_host.get(host).copied().unwrap_or(0)
    }

    /// Locks plus blocked requests in all.
    pub fn total(&self) -> usize {
        self.total
    }

    fn recount(&mut self, host: &Bytes, before: usize, after: usize) {
        let n = self.per_host.entry(host.clone()).or_insert(0);
        *n = *n + after - before;
        self.total = self.total + after - before;
        if *n == 0 {
            self.per_host.remove(host);
        }
    }

    fn cleanup(&mut self, fh: &[u8]) {
        if self
            .files
            .get(fh)
            .is_some_and(|f| f.held.is_empty() && f.waiting.is_empty())
        {
            self.files.remove(fh);
        }
    }
}

/// A share reservation (NLM SHARE, XNFS "fsh4_mode"/"fsh4_access").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Client host.
    pub host: Bytes,
    /// Owner handle.
    pub oh: Bytes,
    /// What it denies others: bit 0 read, bit 1 write.
    pub mode: u32,
    /// What it uses: bit 0 read, bit 1 write.
    pub access: u32,
}

/// Share reservations per file handle.
#[derive(Debug, Default)]
pub struct ShareTable {
    files: HashMap<Bytes, Vec<Share>>,
    total: usize,
}

impl ShareTable {
    /// Adds (or replaces, for the same host and `oh`) a reservation, unless another
    /// owner's conflicts: one denies what the other accesses (XNFS SHARE). `limit`
    /// bounds the reservations in all (false: NLM4_DENIED_NOLOCKS, as `Err(None)`).
    pub fn share(&mut self, fh: &Bytes, s: Share, limit: usize) -> Result<(), Option<Share>> {
        let list = self.files.entry(fh.clone()).or_default();
        if let Some(c) = list.iter().find(|o| {
            !(o.host == s.host && o.oh == s.oh)
                && ((o.mode & s.access) != 0 || (s.mode & o.access) != 0)
        }) {
            return Err(Some(c.clone()));
        }
        if let Some(o) = list.iter_mut().find(|o| o.host == s.host && o.oh == s.oh) {
            *o = s;
            return Ok(());
        }
        if self.total >= limit {
            return Err(None);
        }
        list.push(s);
        self.total += 1;
        Ok(())
    }

    /// Removes the reservation of (`host`, `oh`) on `fh`, if any.
    pub fn unshare(&mut self, fh: &[u8], host: &[u8], oh: &[u8]) {
        if let Some(list) = self.files.get_mut(fh) {
            let n = list.len();
            list.retain(|o| !(o.host == host && o.oh == oh));
            self.total -= n - list.len();
            if list.is_empty() {
                self.files.remove(fh);
            }
        }
    }

    /// Removes every reservation of `host`.
    pub fn drop_host(&mut self, host: &[u8]) {
        self.files.retain(|_, list| {
            let n = list.len();
            list.retain(|o| o.host != host);
            self.total -= n - list.len();
            !list.is_empty()
        });
    }
}

#[cfg(test)]
mod tests;

//! NLM version 4 and NSM version 1 on the wire.
//!
//! NLM v4: the Open Group's XNFS (C702) chapter 11 ("Network Lock Manager Protocol",
//! version 4 as in RFC 1813 appendix II, `nlm4_prot.x`). NSM: XNFS chapter 11's
//! "Network Status Monitor Protocol" (`sm_inter.x`). Every decoder bounds its
//! strings and netobjs before anything is sliced, so hostile input is an
//! [`xdr::XdrError`] (GARBAGE_ARGS), never a panic or a large allocation.

use xdr::{Bytes, Decode, Decoder, Encode, Encoder, Result};

/// NLM program number (XNFS, RFC 1813 appendix II).
pub const NLM_PROGRAM: u32 = 100_021;
/// NLM version 4, the version for NFS version 3 (RFC 1813 appendix II).
pub const NLM_V4: u32 = 4;
/// NSM program number (XNFS, `sm_inter.x`: `SM_PROG`).
pub const NSM_PROGRAM: u32 = 100_024;
/// NSM version 1 (`SM_VERS`).
pub const NSM_V1: u32 = 1;

/// `LM_MAXSTRLEN`: longest `caller_name`.
pub const LM_MAXSTRLEN: u32 = 1024;
/// `MAXNETOBJ_SZ`: longest `netobj` (cookies, handles, owner handles).
pub const MAXNETOBJ_SZ: u32 = 1024;
/// `SM_MAXSTRLEN`: longest NSM `mon_name`.
pub const SM_MAXSTRLEN: u32 = 1024;

/// NLM v4 procedures (RFC 1813 appendix II, `program NLM_PROG`, `version NLM4_VERS`).
pub mod proc4 {
    #![allow(missing_docs)]
    pub const NULL: u32 = 0;
    pub const TEST: u32 = 1;
    pub const LOCK: u32 = 2;
    pub const CANCEL: u32 = 3;
    pub const UNLOCK: u32 = 4;
    pub const GRANTED: u32 = 5;
    pub const TEST_MSG: u32 = 6;
    pub const LOCK_MSG: u32 = 7;
    pub const CANCEL_MSG: u32 = 8;
    pub const UNLOCK_MSG: u32 = 9;
    pub const GRANTED_MSG: u32 = 10;
    pub const TEST_RES: u32 = 11;
    pub const LOCK_RES: u32 = 12;
    pub const CANCEL_RES: u32 = 13;
    pub const UNLOCK_RES: u32 = 14;
    pub const GRANTED_RES: u32 = 15;
    pub const SHARE: u32 = 20;
    pub const UNSHARE: u32 = 21;
    pub const NM_LOCK: u32 = 22;
    pub const FREE_ALL: u32 = 23;

    /// The procedure's name as the specification writes it (for metrics).
    pub fn name(p: u32) -> Option<&'static str> {
        const NAMES: [&str; 24] = [
            "NULL",
            "TEST",
            "LOCK",
            "CANCEL",
            "UNLOCK",
            "GRANTED",
            "TEST_MSG",
            "LOCK_MSG",
            "CANCEL_MSG",
            "UNLOCK_MSG",
            "GRANTED_MSG",
            "TEST_RES",
            "LOCK_RES",
            "CANCEL_RES",
            "UNLOCK_RES",
            "GRANTED_RES",
            "",
            "",
            "",
            "",
            "SHARE",
            "UNSHARE",
            "NM_LOCK",
            "FREE_ALL",
        ];
        NAMES.get(p as usize).copied().filter(|n| !n.is_empty())
    }
}

/// NSM procedures (`sm_inter.x`).
pub mod sm_proc {
    #![allow(missing_docs)]
    pub const NULL: u32 = 0;
    pub const STAT: u32 = 1;
    pub const MON: u32 = 2;
    pub const UNMON: u32 = 3;
    pub const UNMON_ALL: u32 = 4;
    pub const SIMU_CRASH: u32 = 5;
    pub const NOTIFY: u32 = 6;

    /// The procedure's name as `sm_inter.x` writes it, less `SM_` (for metrics).
    pub fn name(p: u32) -> Option<&'static str> {
        const NAMES: [&str; 7] = [
            "NULL",
            "STAT",
            "MON",
            "UNMON",
            "UNMON_ALL",
            "SIMU_CRASH",
            "NOTIFY",
        ];
        NAMES.get(p as usize).copied()
    }
}

/// `enum nlm4_stats` (RFC 1813 appendix II).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stat {
    /// NLM4_GRANTED.
    Granted = 0,
    /// NLM4_DENIED: a conflicting lock is held.
    Denied = 1,
    /// NLM4_DENIED_NOLOCKS: out of resources (our limits).
    DeniedNolocks = 2,
    /// NLM4_BLOCKED: queued; a GRANTED callback follows.
    Blocked = 3,
    /// NLM4_DENIED_GRACE_PERIOD: only reclaims now.
    DeniedGracePeriod = 4,
    /// NLM4_DEADLCK.
    Deadlck = 5,
    /// NLM4_ROFS.
    Rofs = 6,
    /// NLM4_STALE_FH.
    StaleFh = 7,
    /// NLM4_FBIG: offset or length out of range.
    Fbig = 8,
    /// NLM4_FAILED.
    Failed = 9,
}

impl Stat {
    /// The status with this number, if any.
    pub fn from_u32(v: u32) -> Option<Stat> {
        use Stat::*;
        Some(match v {
            0 => Granted,
            1 => Denied,
            2 => DeniedNolocks,
            3 => Blocked,
            4 => DeniedGracePeriod,
            5 => Deadlck,
            6 => Rofs,
            7 => StaleFh,
            8 => Fbig,
            9 => Failed,
            _ => return None,
        })
    }
}

fn netobj(dec: &mut Decoder) -> Result<Bytes> {
    dec.opaque(MAXNETOBJ_SZ)
}

/// `struct nlm4_lock`: who locks which byte range of which file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Lock {
    /// `caller_name<LM_MAXSTRLEN>`: the client host's name (Linux: its nodename).
    pub caller_name: Bytes,
    /// `fh`: the NFS file handle.
    pub fh: Bytes,
    /// `oh`: the owner handle (Linux: "svid@nodename").
    pub oh: Bytes,
    /// `svid`: the owner on the client (Linux: a per-owner id, its "pid").
    pub svid: i32,
    /// `l_offset`.
    pub offset: u64,
    /// `l_len`; 0 means "to the end of the file and beyond".
    pub len: u64,
}

impl Decode for Nlm4Lock {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(Nlm4Lock {
            caller_name: dec.string(LM_MAXSTRLEN)?,
            fh: netobj(dec)?,
            oh: netobj(dec)?,
            svid: dec.i32()?,
            offset: dec.u64()?,
            len: dec.u64()?,
        })
    }
}

impl Encode for Nlm4Lock {
    fn encode(&self, enc: &mut Encoder) {
        enc.string(&self.caller_name)
            .opaque(&self.fh)
            .opaque(&self.oh)
            .i32(self.svid)
            .u64(self.offset)
            .u64(self.len);
    }
}

/// `struct nlm4_lockargs` (LOCK, LOCK_MSG, NM_LOCK).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockArgs {
    /// `cookie`, echoed in the reply.
    pub cookie: Bytes,
    /// `block`: wait (NLM4_BLOCKED, then GRANTED) instead of NLM4_DENIED.
    pub block: bool,
    /// `exclusive`: a write lock.
    pub exclusive: bool,
    /// `alock`.
    pub lock: Nlm4Lock,
    /// `reclaim`: the client re-establishes a lock after our restart.
    pub reclaim: bool,
    /// `state`: the client's NSM state.
    pub state: i32,
}

impl Decode for LockArgs {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(LockArgs {
            cookie: netobj(dec)?,
            block: dec.bool()?,
            exclusive: dec.bool()?,
            lock: Nlm4Lock::decode(dec)?,
            reclaim: dec.bool()?,
            state: dec.i32()?,
        })
    }
}

impl Encode for LockArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie)
            .bool(self.block)
            .bool(self.exclusive);
        self.lock.encode(enc);
        enc.bool(self.reclaim).i32(self.state);
    }
}

/// `struct nlm4_cancargs` (CANCEL, CANCEL_MSG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancArgs {
    /// `cookie`.
    pub cookie: Bytes,
    /// `block`.
    pub block: bool,
    /// `exclusive`.
    pub exclusive: bool,
    /// `alock`.
    pub lock: Nlm4Lock,
}

impl Decode for CancArgs {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(CancArgs {
            cookie: netobj(dec)?,
            block: dec.bool()?,
            exclusive: dec.bool()?,
            lock: Nlm4Lock::decode(dec)?,
        })
    }
}

impl Encode for CancArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie)
            .bool(self.block)
            .bool(self.exclusive);
        self.lock.encode(enc);
    }
}

/// `struct nlm4_testargs` (TEST, TEST_MSG, and our GRANTED callbacks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestArgs {
    /// `cookie`.
    pub cookie: Bytes,
    /// `exclusive`.
    pub exclusive: bool,
    /// `alock`.
    pub lock: Nlm4Lock,
}

impl Decode for TestArgs {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(TestArgs {
            cookie: netobj(dec)?,
            exclusive: dec.bool()?,
            lock: Nlm4Lock::decode(dec)?,
        })
    }
}

impl Encode for TestArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie).bool(self.exclusive);
        self.lock.encode(enc);
    }
}

/// `struct nlm4_unlockargs` (UNLOCK, UNLOCK_MSG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnlockArgs {
    /// `cookie`.
    pub cookie: Bytes,
    /// `alock`.
    pub lock: Nlm4Lock,
}

impl Decode for UnlockArgs {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(UnlockArgs {
            cookie: netobj(dec)?,
            lock: Nlm4Lock::decode(dec)?,
        })
    }
}

impl Encode for UnlockArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie);
        self.lock.encode(enc);
    }
}

/// `struct nlm4_share`: a DOS-style share reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Share {
    /// `caller_name`.
    pub caller_name: Bytes,
    /// `fh`.
    pub fh: Bytes,
    /// `oh`.
    pub oh: Bytes,
    /// `mode` (`fsh4_mode`: what others are denied: 0 none, 1 read, 2 write, 3 both).
    pub mode: u32,
    /// `access` (`fsh4_access`: 0 none, 1 read, 2 write, 3 both).
    pub access: u32,
}

/// `struct nlm4_shareargs` (SHARE, UNSHARE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareArgs {
    /// `cookie`.
    pub cookie: Bytes,
    /// `share`.
    pub share: Nlm4Share,
    /// `reclaim`.
    pub reclaim: bool,
}

impl Decode for ShareArgs {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        let cookie = netobj(dec)?;
        let share = Nlm4Share {
            caller_name: dec.string(LM_MAXSTRLEN)?,
            fh: netobj(dec)?,
            oh: netobj(dec)?,
            mode: enum_upto(dec, 3)?,
            access: enum_upto(dec, 3)?,
        };
        Ok(ShareArgs {
            cookie,
            share,
            reclaim: dec.bool()?,
        })
    }
}

impl Encode for ShareArgs {
    fn encode(&self, enc: &mut Encoder) {
        let s = &self.share;
        enc.opaque(&self.cookie)
            .string(&s.caller_name)
            .opaque(&s.fh)
            .opaque(&s.oh)
            .u32(s.mode)
            .u32(s.access)
            .bool(self.reclaim);
    }
}

/// An enum value that must be at most `max` (RFC 4506 §4.3: only declared values).
fn enum_upto(dec: &mut Decoder, max: u32) -> Result<u32> {
    let v = dec.u32()?;
    if v > max {
        return Err(xdr::XdrError::InvalidDiscriminant(v));
    }
    Ok(v)
}

/// `struct nlm4_notify` (FREE_ALL): a host that lost its locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// `name<LM_MAXSTRLEN>`: the client's host name.
    pub name: Bytes,
    /// `state`.
    pub state: i32,
}

impl Decode for Notify {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(Notify {
            name: dec.string(LM_MAXSTRLEN)?,
            state: dec.i32()?,
        })
    }
}

impl Encode for Notify {
    fn encode(&self, enc: &mut Encoder) {
        enc.string(&self.name).i32(self.state);
    }
}

/// `struct nlm4_res`: cookie and status (LOCK, CANCEL, UNLOCK, GRANTED and their
/// `_RES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Res {
    /// `cookie`, the call's.
    pub cookie: Bytes,
    /// `stat`.
    pub stat: Stat,
}

impl Encode for Res {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie).u32(self.stat as u32);
    }
}

impl Decode for Res {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        let cookie = netobj(dec)?;
        let v = dec.u32()?;
        let stat = Stat::from_u32(v).ok_or(xdr::XdrError::InvalidDiscriminant(v))?;
        Ok(Res { cookie, stat })
    }
}

/// `struct nlm4_holder`: the lock in the way (TEST's answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// `exclusive`.
    pub exclusive: bool,
    /// `svid`.
    pub svid: i32,
    /// `oh`.
    pub oh: Bytes,
    /// `l_offset`.
    pub offset: u64,
    /// `l_len` (0: to the end).
    pub len: u64,
}

/// `struct nlm4_testres`: NLM4_DENIED carries the holder (`union nlm4_testrply`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRes {
    /// `cookie`.
    pub cookie: Bytes,
    /// `stat`.
    pub stat: Stat,
    /// With NLM4_DENIED: the conflicting lock.
    pub holder: Option<Holder>,
}

impl Encode for TestRes {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie).u32(self.stat as u32);
        if self.stat == Stat::Denied {
            let h = self.holder.clone().unwrap_or(Holder {
                exclusive: true,
                svid: 0,
                oh: Bytes::new(),
                offset: 0,
                len: 0,
            });
            enc.bool(h.exclusive)
                .i32(h.svid)
                .opaque(&h.oh)
                .u64(h.offset)
                .u64(h.len);
        }
    }
}

impl Decode for TestRes {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        let cookie = netobj(dec)?;
        let v = dec.u32()?;
        let stat = Stat::from_u32(v).ok_or(xdr::XdrError::InvalidDiscriminant(v))?;
        let holder = if stat == Stat::Denied {
            Some(Holder {
                exclusive: dec.bool()?,
                svid: dec.i32()?,
                oh: netobj(dec)?,
                offset: dec.u64()?,
                len: dec.u64()?,
            })
        } else {
            None
        };
        Ok(TestRes {
            cookie,
            stat,
            holder,
        })
    }
}

/// `struct nlm4_shareres`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRes {
    /// `cookie`.
    pub cookie: Bytes,
    /// `stat`.
    pub stat: Stat,
    /// `sequence` (unused; 0).
    pub sequence: i32,
}

impl Encode for ShareRes {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.cookie)
            .u32(self.stat as u32)
            .i32(self.sequence);
    }
}

impl Decode for ShareRes {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        let cookie = netobj(dec)?;
        let v = dec.u32()?;
        let stat = Stat::from_u32(v).ok_or(xdr::XdrError::InvalidDiscriminant(v))?;
        Ok(ShareRes {
            cookie,
            stat,
            sequence: dec.i32()?,
        })
    }
}

/// NSM `struct stat_chge` (SM_NOTIFY's argument): `mon_name` restarted and is now
/// at `state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatChge {
    /// `mon_name<SM_MAXSTRLEN>`.
    pub mon_name: Bytes,
    /// `state`.
    pub state: i32,
}

impl Decode for StatChge {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        Ok(StatChge {
            mon_name: dec.string(SM_MAXSTRLEN)?,
            state: dec.i32()?,
        })
    }
}

impl Encode for StatChge {
    fn encode(&self, enc: &mut Encoder) {
        enc.string(&self.mon_name).i32(self.state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Nlm4Lock {
        Nlm4Lock {
            caller_name: Bytes::from_static(b"guest"),
            fh: Bytes::from_static(&[1, 2, 3, 4, 5]),
            oh: Bytes::from_static(b"7@guest"),
            svid: 7,
            offset: 10,
            len: 0,
        }
    }

    #[test]
    fn lockargs_round_trip() {
        let a = LockArgs {
            cookie: Bytes::from_static(b"c"),
            block: true,
            exclusive: false,
            lock: lock(),
            reclaim: true,
            state: 3,
        };
        assert_eq!(LockArgs::from_xdr(a.to_xdr().to_bytes()).unwrap(), a);
    }

    #[test]
    fn testres_denied_carries_holder() {
        let r = TestRes {
            cookie: Bytes::new(),
            stat: Stat::Denied,
            holder: Some(Holder {
                exclusive: true,
                svid: 9,
                oh: Bytes::from_static(b"x"),
                offset: 1,
                len: 2,
            }),
        };
        assert_eq!(TestRes::from_xdr(r.to_xdr().to_bytes()).unwrap(), r);
        let g = TestRes {
            cookie: Bytes::new(),
            stat: Stat::Granted,
            holder: None,
        };
        assert_eq!(g.to_xdr().to_bytes().len(), 8);
    }

    #[test]
    fn oversized_netobj_and_truncation_are_errors() {
        let mut e = Encoder::new();
        e.u32(MAXNETOBJ_SZ + 1);
        assert!(TestArgs::from_xdr(e.finish().to_bytes()).is_err());
        let whole = LockArgs {
            cookie: Bytes::from_static(b"c"),
            block: true,
            exclusive: true,
            lock: lock(),
            reclaim: false,
            state: 1,
        }
        .to_xdr()
        .to_bytes();
        for n in 0..whole.len() {
            assert!(LockArgs::from_xdr(whole.slice(..n)).is_err());
        }
        let mut bad_share = Encoder::new();
        bad_share
            .opaque(b"")
            .string(b"h")
            .opaque(b"f")
            .opaque(b"o")
            .u32(4)
            .u32(0)
            .bool(false);
        assert!(ShareArgs::from_xdr(bad_share.finish().to_bytes()).is_err());
    }
}

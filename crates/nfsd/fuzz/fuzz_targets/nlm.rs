//! NLM v4 / NSM arguments from arbitrary bytes, and the lock table driven by them.
//!
//! The first byte picks a procedure; the rest is decoded as its arguments (no panic,
//! whatever the bytes). Decoded LOCK / UNLOCK / CANCEL / TEST requests are applied to
//! a [`LockTable`] with small limits, after which its invariants must hold: no two
//! held locks of different owners conflict, one owner's locks never overlap, and the
//! counts agree with what is held and queued.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use nfsd::nlm::locks::{Limits, LockTable, Owner, Range, Waiter};
use nfsd::nlm::xdr::*;
use xdr::{Bytes, Decode, Decoder};

thread_local! {
    static TABLE: RefCell<LockTable<()>> = RefCell::new(LockTable::new(Limits { per_host: 64, total: 256 }));
}

fn owner(l: &Nlm4Lock) -> Owner {
    Owner {
        host: l.caller_name.clone(),
        svid: l.svid,
        oh: l.oh.clone(),
    }
}

/// Folds handles and names onto a few values so that requests meet.
fn small(mut l: Nlm4Lock) -> Nlm4Lock {
    l.fh = Bytes::from(vec![l.fh.first().copied().unwrap_or(0) % 3]);
    l.caller_name = Bytes::from(vec![l.caller_name.first().copied().unwrap_or(0) % 3]);
    l.oh = Bytes::new();
    l.svid %= 4;
    l.offset %= 64;
    l.len %= 32;
    l
}

fn check(t: &LockTable<()>, fh: &Bytes) {
    let held = t.held(fh);
    for (i, a) in held.iter().enumerate() {
        for b in &held[i + 1..] {
            let overlap = a.range.start <= b.range.end && b.range.start <= a.range.end;
            if a.owner == b.owner {
                assert!(!overlap, "one owner's locks overlap: {a:?} {b:?}");
            } else {
                assert!(!(overlap && (a.exclusive || b.exclusive)), "conflict held: {a:?} {b:?}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let mut d = Decoder::new(Bytes::copy_from_slice(rest));
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        match which % 9 {
            0 => {
                if let Ok(a) = LockArgs::decode(&mut d) {
                    let l = small(a.lock);
                    if let Some(r) = Range::from_nlm(l.offset, l.len) {
                        if t.lock(&l.fh, &owner(&l), r, a.exclusive).is_err() && a.block {
                            let w = Waiter { owner: owner(&l), range: r, exclusive: a.exclusive, data: () };
                            let _ = t.block(&l.fh, w);
                        }
                        check(&t, &l.fh);
                    }
                }
            }
            1 => {
                if let Ok(a) = UnlockArgs::decode(&mut d) {
                    let l = small(a.lock);
                    if let Some(r) = Range::from_nlm(l.offset, l.len) {
                        let granted = t.unlock(&l.fh, &owner(&l), r);
                        for (fh, _) in granted {
                            check(&t, &fh);
                        }
                        check(&t, &l.fh);
                    }
                }
            }
            2 => {
                if let Ok(a) = CancArgs::decode(&mut d) {
                    let l = small(a.lock);
                    if let Some(r) = Range::from_nlm(l.offset, l.len) {
                        t.cancel(&l.fh, &owner(&l), r, a.exclusive);
                    }
                }
            }
            3 => {
                if let Ok(a) = TestArgs::decode(&mut d) {
                    let l = small(a.lock);
                    if let Some(r) = Range::from_nlm(l.offset, l.len) {
                        let _ = t.test(&l.fh, &owner(&l), r, a.exclusive);
                    }
                }
            }
            4 => {
                if let Ok(n) = Notify::decode(&mut d) {
                    let host = Bytes::from(vec![n.name.first().copied().unwrap_or(0) % 3]);
                    t.drop_host(&host);
                    assert_eq!(t.host_entries(&host), 0);
                }
            }
            5 => {
                let _ = ShareArgs::decode(&mut d);
            }
            6 => {
                let _ = StatChge::decode(&mut d);
            }
            7 => {
                let _ = TestRes::decode(&mut d);
            }
            _ => {
                let _ = Res::decode(&mut d);
                let _ = ShareRes::decode(&mut d);
            }
        }
        assert!(t.total() <= 256);
    });
});

use super::*;

fn owner(host: &'static str, svid: i32) -> Owner {
    Owner {
        host: Bytes::from_static(host.as_bytes()),
        svid,
        oh: Bytes::from(format!("{svid}@{host}")),
    }
}

fn r(start: u64, end: u64) -> Range {
    Range { start, end }
}

fn fh() -> Bytes {
    Bytes::from_static(b"file-1")
}

fn table() -> LockTable<u32> {
    LockTable::new(Limits::default())
}

/// The held locks of `fh` as (svid, start, end, exclusive), sorted.
fn held(t: &LockTable<u32>) -> Vec<(i32, u64, u64, bool)> {
    let mut v: Vec<_> = t
        .held(&fh())
        .iter()
        .map(|h| (h.owner.svid, h.range.start, h.range.end, h.exclusive))
        .collect();
    v.sort();
    v
}

fn waiter(o: &Owner, range: Range, exclusive: bool, data: u32) -> Waiter<u32> {
    Waiter {
        owner: o.clone(),
        range,
        exclusive,
        data,
    }
}

#[test]
fn nlm_ranges_convert_both_ways() {
    assert_eq!(Range::from_nlm(0, 0), Some(r(0, u64::MAX)));
    assert_eq!(Range::from_nlm(10, 5), Some(r(10, 14)));
    assert_eq!(
        Range::from_nlm(OFFSET_MAX, 2),
        Some(r(OFFSET_MAX, u64::MAX))
    );
    assert_eq!(Range::from_nlm(OFFSET_MAX + 1, 1), None);
    assert_eq!(Range::from_nlm(5, u64::MAX), Some(r(5, u64::MAX)));
    assert_eq!(r(10, 14).to_nlm(), (10, 5));
    assert_eq!(r(7, u64::MAX).to_nlm(), (7, 0));
}

#[test]
fn conflicts_only_between_owners_and_with_an_exclusive_lock() {
    let mut t = table();
    let (a, b) = (owner("h1", 1), owner("h1", 2));
    t.lock(&fh(), &a, r(0, 9), false).unwrap();
    // Shared + shared of another owner: fine.
    t.lock(&fh(), &b, r(5, 14), false).unwrap();
    // Exclusive over a shared lock of another owner: conflict, naming the holder.
    match t.lock(&fh(), &b, r(0, 0), true) {
        Err(LockError::Conflict(h)) => assert_eq!((h.owner.svid, h.range), (1, r(0, 9))),
        other => panic!("{other:?}"),
    }
    // Same svid on another host is another owner.
    let c = owner("h2", 1);
    assert!(t.test(&fh(), &c, r(9, 9), true).is_some());
    assert!(t.test(&fh(), &c, r(15, 20), true).is_none());
    // An owner never conflicts with itself.
    assert!(t.test(&fh(), &a, r(0, 4), true).is_none());
}

#[test]
fn unlock_of_the_middle_splits_and_unlock_of_nothing_is_fine() {
    let mut t = table();
    let a = owner("h", 1);
    t.lock(&fh(), &a, r(0, 99), true).unwrap();
    assert!(t.unlock(&fh(), &a, r(10, 19)).is_empty());
    assert_eq!(held(&t), vec![(1, 0, 9, true), (1, 20, 99, true)]);
    t.unlock(&fh(), &a, r(200, 300));
    assert_eq!(held(&t), vec![(1, 0, 9, true), (1, 20, 99, true)]);
    // Unlock spanning both pieces' edges.
    t.unlock(&fh(), &a, r(5, 24));
    assert_eq!(held(&t), vec![(1, 0, 4, true), (1, 25, 99, true)]);
    t.unlock(&fh(), &a, r(0, u64::MAX));
    assert!(held(&t).is_empty());
    assert_eq!(t.total(), 0);
    assert_eq!(t.host_entries(b"h"), 0);
}

#[test]
fn same_kind_locks_merge_when_overlapping_or_adjacent() {
    let mut t = table();
    let a = owner("h", 1);
    t.lock(&fh(), &a, r(0, 4), true).unwrap();
    t.lock(&fh(), &a, r(10, 14), true).unwrap();
    t.lock(&fh(), &a, r(5, 9), true).unwrap();
    assert_eq!(held(&t), vec![(1, 0, 14, true)]);
    t.lock(&fh(), &a, r(12, 20), true).unwrap();
    assert_eq!(held(&t), vec![(1, 0, 20, true)]);
    assert_eq!(t.total(), 1);
}

#[test]
fn upgrade_and_downgrade_in_place_cut_the_other_kind() {
    let mut t = table();
    let a = owner("h", 1);
    t.lock(&fh(), &a, r(0, 99), false).unwrap();
    // Upgrade the middle: shared pieces either side stay.
    t.lock(&fh(), &a, r(40, 59), true).unwrap();
    assert_eq!(
        held(&t),
        vec![(1, 0, 39, false), (1, 40, 59, true), (1, 60, 99, false)]
    );
    // Downgrade it back: all one shared lock again.
    t.lock(&fh(), &a, r(40, 59), false).unwrap();
    assert_eq!(held(&t), vec![(1, 0, 99, false)]);
    // Upgrade the whole: another owner's shared lock prevents it.
    let b = owner("h", 2);
    t.lock(&fh(), &b, r(99, 99), false).unwrap();
    assert!(matches!(
        t.lock(&fh(), &a, r(0, 99), true),
        Err(LockError::Conflict(_))
    ));
    assert_eq!(held(&t), vec![(1, 0, 99, false), (2, 99, 99, false)]);
}

#[test]
fn blocked_requests_are_granted_in_order_when_the_holder_unlocks() {
    let mut t = table();
    let (a, b, c) = (owner("h1", 1), owner("h2", 2), owner("h3", 3));
    t.lock(&fh(), &a, r(0, 9), true).unwrap();
    t.block(&fh(), waiter(&b, r(0, 9), true, 20)).unwrap();
    t.block(&fh(), waiter(&c, r(5, 5), false, 30)).unwrap();
    // Asking again keeps one entry.
    t.block(&fh(), waiter(&b, r(0, 9), true, 21)).unwrap();
    assert_eq!(t.waiting(&fh()), 2);
    // Unlocking a part that no one waits for grants nothing.
    assert!(t.unlock(&fh(), &a, r(50, 60)).is_empty());
    let granted = t.unlock(&fh(), &a, r(0, 9));
    // b first (exclusive), which keeps c waiting.
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].1.data, 21);
    assert_eq!(held(&t), vec![(2, 0, 9, true)]);
    assert_eq!(t.waiting(&fh()), 1);
    let granted = t.unlock(&fh(), &b, r(0, u64::MAX));
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].1.data, 30);
    assert_eq!(held(&t), vec![(3, 5, 5, false)]);
    assert_eq!(t.total(), 1);
}

#[test]
fn shared_waiters_are_granted_together() {
    let mut t = table();
    let (a, b, c) = (owner("h", 1), owner("h", 2), owner("h", 3));
    t.lock(&fh(), &a, r(0, 0), true).unwrap();
    t.block(&fh(), waiter(&b, r(0, 0), false, 2)).unwrap();
    t.block(&fh(), waiter(&c, r(0, 0), false, 3)).unwrap();
    assert_eq!(t.unlock(&fh(), &a, r(0, 0)).len(), 2);
    assert_eq!(held(&t), vec![(2, 0, 0, false), (3, 0, 0, false)]);
}

#[test]
fn cancel_removes_a_blocked_request_and_a_granted_lock_drops_its_own_waiter() {
    let mut t = table();
    let (a, b) = (owner("h1", 1), owner("h2", 2));
    t.lock(&fh(), &a, r(0, 9), true).unwrap();
    t.block(&fh(), waiter(&b, r(0, 9), true, 1)).unwrap();
    assert!(!t.cancel(&fh(), &b, r(0, 8), true));
    assert!(t.cancel(&fh(), &b, r(0, 9), true));
    assert!(!t.cancel(&fh(), &b, r(0, 9), true));
    assert!(t.unlock(&fh(), &a, r(0, 9)).is_empty());
    // A client that re-polls its blocked LOCK and gets it: the waiter goes.
    t.lock(&fh(), &a, r(0, 9), true).unwrap();
    t.block(&fh(), waiter(&b, r(0, 9), true, 1)).unwrap();
    t.unlock(&fh(), &a, r(0, 9));
    assert_eq!(held(&t), vec![(2, 0, 9, true)]);
    assert_eq!(t.waiting(&fh()), 0);
    assert_eq!(t.total(), 1);
}

#[test]
fn drop_host_releases_everything_of_that_host_and_wakes_others() {
    let mut t = table();
    let (a1, a2, b) = (owner("ha", 1), owner("ha", 2), owner("hb", 3));
    let other = Bytes::from_static(b"file-2");
    t.lock(&fh(), &a1, r(0, 9), true).unwrap();
    t.lock(&other, &a2, r(0, 0), false).unwrap();
    t.block(&fh(), waiter(&b, r(0, 0), true, 7)).unwrap();
    t.block(&other, waiter(&a1, r(0, 0), true, 8)).unwrap();
    let granted = t.drop_host(b"ha");
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].1.data, 7);
    assert!(t.held(&other).is_empty());
    assert_eq!(t.waiting(&other), 0);
    assert_eq!(t.host_entries(b"ha"), 0);
    assert_eq!(t.total(), 1);
}

#[test]
fn limits_give_nolocks_and_change_nothing() {
    let mut t: LockTable<u32> = LockTable::new(Limits {
        per_host: 2,
        total: 3,
    });
    let (a, b) = (owner("ha", 1), owner("hb", 2));
    t.lock(&fh(), &a, r(0, 0), true).unwrap();
    t.lock(&fh(), &a, r(10, 10), true).unwrap();
    assert_eq!(t.lock(&fh(), &a, r(20, 20), true), Err(LockError::NoLocks));
    // Merging into an existing lock adds nothing and passes.
    t.lock(&fh(), &a, r(1, 5), true).unwrap();
    assert_eq!(
        t.block(&fh(), waiter(&a, r(50, 50), true, 0)),
        Err(LockError::NoLocks)
    );
    t.lock(&fh(), &b, r(30, 30), true).unwrap();
    assert_eq!(t.lock(&fh(), &b, r(40, 40), true), Err(LockError::NoLocks));
    assert_eq!(t.total(), 3);
    assert_eq!(held(&t).len(), 3);
    // Splitting one of a's locks in two would pass a's limit too.
    let before = held(&t);
    t.unlock(&fh(), &a, r(2, 2));
    // An unlock always succeeds, even when it splits past a limit.
    assert_eq!(held(&t).len(), before.len() + 1);
}

#[test]
fn shares_conflict_on_deny_against_access() {
    let mut s = ShareTable::default();
    let share = |host: &'static str, mode, access| Share {
        host: Bytes::from_static(host.as_bytes()),
        oh: Bytes::from_static(b"o"),
        mode,
        access,
    };
    // Reader denying writers.
    s.share(&fh(), share("a", 2, 1), 10).unwrap();
    // Another reader denying nothing: fine.
    s.share(&fh(), share("b", 0, 1), 10).unwrap();
    // A writer: denied by a's mode.
    assert!(matches!(s.share(&fh(), share("c", 0, 2), 10), Err(Some(_))));
    // One denying reads: b reads.
    assert!(s.share(&fh(), share("c", 1, 0), 10).is_err());
    s.unshare(&fh(), b"a", b"o");
    s.drop_host(b"b");
    s.share(&fh(), share("c", 0, 2), 10).unwrap();
    assert!(matches!(s.share(&fh(), share("d", 0, 0), 1), Err(None)));
}

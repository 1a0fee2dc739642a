//! Applying AUTH_SYS credentials (RFC 5531 Appendix A) to file-system calls.
//!
//! When the server runs as root, each procedure's file-system calls run on a thread
//! (the blocking pool's; for the small metadata procedures the async worker's,
//! [`crate::service::runs_inline`]) whose *file-system* identity (Linux `setfsuid`, `setfsgid` and the thread's
//! supplementary groups, all per-thread) is switched to the caller's for the duration
//! of the call, so the kernel does every permission check exactly as for a local
//! process of that user. Handle resolution runs as the server, as knfsd does. Never
//! on a thread that uses a verbs RDMA device ([`keep_identity`]).
//!
//! [`Squash`] maps identities first, per export and client
//! ([`crate::exports::ExportOptions::identity`]): by default (like knfsd's
//! `root_squash`) uid 0 and gid 0 become the anonymous ids; AUTH_NONE callers are
//! always anonymous.
//!
//! A server that does not run as root cannot switch identities: every call then acts
//! as the server's own user (an implicit `all_squash` to that user), which
//! [`switching`] reports so the binary can say so at startup.
#![allow(unsafe_code)]

use oncrpc::Gids;
use rustix::process::{Gid, Uid};

/// A file-system identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (AUTH_SYS allows 16).
    pub groups: Gids,
}

/// How caller identities are mapped (knfsd's `root_squash` / `all_squash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Squash {
    /// Use the caller's ids as given (`no_root_squash`).
    None,
    /// Map uid 0 / gid 0 to the anonymous ids (`root_squash`, the default).
    #[default]
    Root,
    /// Map everyone to the anonymous ids (`all_squash`).
    All,
}

/// Whether identities can be switched: only a server running as root can (else every
/// call acts as the server's own user).
pub fn switching() -> bool {
    rustix::process::geteuid().is_root()
}

/// While alive, the current thread's file-system identity is the caller's. Dropping
/// it restores the server's (fsuid 0, fsgid 0), or the identity of an enclosing guard.
///
/// Guards nest: a guard entered while the thread already acts as the same identity
/// (a procedure that switches once around a loop whose steps switch too, such as
/// READDIRPLUS's entries) makes no system call, entering or leaving.
///
/// Supplementary groups and the file-system gid are switched only when they differ
/// from the ones the thread has ([`switch_to`]): a server with root's file-system
/// capabilities keeps the last caller's groups and gid while it acts as itself, since
/// those capabilities override every check a group could pass, and the server's own
/// new files take its group explicitly ([`server_files`]). So one user's calls cost a
/// setfsuid entering and one leaving (2 system calls), not 6; a server without those
/// capabilities drops the groups and the gid on leaving, as before.
#[derive(Debug)]
#[must_use = "the identity is switched back when this guard drops"]
pub struct AsCaller {
    active: bool,
}

thread_local! {
    /// Whether the current thread must never switch identity ([`keep_identity`]).
    static KEEPS_IDENTITY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether the current thread ever switched its identity ([`ever_switched`]).
    static SWITCHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The identities the current thread acts as, innermost last (empty: the
    /// server's own).
    static ACTING_AS: std::cell::RefCell<Vec<Identity>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The supplementary groups this thread has, as last set here (`None`: never set
    /// here, the process's own).
    static GROUPS: std::cell::RefCell<Option<Vec<u32>>> = const { std::cell::RefCell::new(None) };
    /// The thread's file-system gid, as last set here (`None`: never set here).
    static FSGID: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    /// The thread's file-system uid, as last set here (`None`: never set here, so
    /// unknown: a thread inherits its creator's).
    static FSUID: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

impl AsCaller {
    /// Switches the current thread to `id` if `switching` (see [`switching`]).
    ///
    /// Only for synchronous code, on a thread that runs nothing else while the guard
    /// lives (a blocking-pool thread, or an async worker within one synchronous call;
    /// never across an `.await`): the switch is per thread.
    pub fn enter(switching: bool, id: &Identity) -> Self {
        if !switching {
            return AsCaller { active: false };
        }
        ACTING_AS.with(|stack| {
            let mut stack = stack.borrow_mut();
            if stack.last() != Some(id) {
                switch_to(Some(id));
            }
            stack.push(id.clone());
        });
        AsCaller { active: true }
    }

    /// How many guards the current thread is inside (tests).
    #[cfg(test)]
    fn depth() -> usize {
        ACTING_AS.with(|stack| stack.borrow().len())
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if self.active {
            ACTING_AS.with(|stack| {
                let mut stack = stack.borrow_mut();
                let left = stack.pop();
                if stack.last() != left.as_ref() {
                    switch_to(stack.last());
                }
            });
        }
    }
}

/// Marks the current thread as one whose identity is never switched: a switch
/// ([`AsCaller::enter`] with `switching`) on it panics before changing anything.
///
/// For the threads that use a verbs RDMA device (`crate::rdma`): Linux refuses a
/// `write` to the device's descriptors (uverbs, rdma_cm: every post, registration,
/// connection step) unless the thread's credentials are the very ones the descriptor
/// was opened with (`ib_safe_file_access` compares the pointers), and any switch,
/// even one back to the server's own ids, gives the thread new ones for good. A
/// panic fails one call (SYSTEM_ERR); a switch would have ended NFS/RDMA on that
/// thread, silently.
pub fn keep_identity() {
    KEEPS_IDENTITY.with(|k| k.set(true));
}

/// Whether the current thread ever switched its identity: a thread it creates then
/// inherits credentials other than the process's first (see [`keep_identity`]).
pub fn ever_switched() -> bool {
    SWITCHED.with(std::cell::Cell::get)
}

/// Makes `id` (`None`: the server's own, fsuid 0 and fsgid 0) the thread's
/// file-system identity.
///
/// The supplementary groups and the fsgid are set only where they differ from the
/// thread's ([`GROUPS`], [`FSGID`]). Leaving for the server's own identity, they are
/// reset only if the server lacks the file-system capabilities or the right to set
/// any gid ([`groups_matter`]); with them, fsuid 0 raises CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID and CAP_CHOWN again, which override
/// every permission check a group could decide. What a group still decides is the
/// group of a new file, and the server makes its own files in [`server_files`],
/// which resets the fsgid first.
fn switch_to(id: Option<&Identity>) {
    assert!(
        !KEEPS_IDENTITY.with(std::cell::Cell::get),
        "identity switch on a thread that must keep its own (an RDMA device thread, \
         creds::keep_identity)"
    );
    SWITCHED.with(|s| s.set(true));
    match id {
        Some(id) => {
            // Order: groups and gid while we still hold CAP_SETGID, then the uid.
            set_groups(&id.groups);
            set_fs_ids(id.uid, id.gid);
        }
        None if groups_matter() => {
            set_fs_ids(0, 0);
            set_groups(&[]);
        }
        None => set_fs_uid(0),
    }
}

/// Sets the thread's supplementary groups to `groups`, unless it has them already.
fn set_groups(groups: &[u32]) {
    GROUPS.with(|current| {
        let mut current = current.borrow_mut();
        if current.as_deref() == Some(groups) {
            return;
        }
        let gids: Vec<Gid> = groups.iter().map(|&g| Gid::from_raw(g)).collect();
        #[cfg(test)]
        SETGROUPS_CALLS.with(|n| n.set(n.get() + 1));
        // On failure the groups are unknown: set them again next time.
        *current = rustix::thread::set_thread_groups(&gids)
            .ok()
            .map(|()| groups.to_vec());
    });
}

/// Whether the server's own identity must have no supplementary groups and fsgid 0:
/// unless the process may raise all of the file-system capabilities that override
/// permission checks (root's, normally), a caller's groups left on the thread could
/// grant the server's own calls (handle resolution) what the groups [] would not;
/// and unless it may set any gid (CAP_SETGID), a kept fsgid could not be relied on to
/// change when the next caller's differs (setfsgid reports no failure).
fn groups_matter() -> bool {
    use rustix::thread::CapabilitySet as C;
    static MATTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MATTER.get_or_init(|| {
        let needed = C::DAC_OVERRIDE | C::DAC_READ_SEARCH | C::FOWNER | C::FSETID | C::CHOWN;
        !rustix::thread::capabilities(None)
            .is_ok_and(|c| c.permitted.contains(needed) && c.effective.contains(C::SETGID))
    })
}

/// Runs `f`, which makes files of the server's own (state records), with the
/// server's own file-system gid: a caller's may have stayed on the thread
/// ([`switch_to`]), and would be the new files' group. Outside any [`AsCaller`]
/// guard only (the server acts as itself).
pub fn server_files<T>(f: impl FnOnce() -> T) -> T {
    debug_assert_eq!(
        ACTING_AS.with(|stack| stack.borrow().len()),
        0,
        "server_files inside a caller's identity"
    );
    // Unknown on a thread that never set it: a thread inherits its creator's.
    if FSGID.with(std::cell::Cell::get) != Some(0) {
        set_fs_gid(0);
    }
    f()
}

#[cfg(test)]
thread_local! {
    /// setgroups calls made by this thread (tests).
    static SETGROUPS_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// setfsgid calls made by this thread (tests).
    static SETFSGID_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// setfsuid calls made by this thread (tests).
    static SETFSUID_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Sets the fsgid, then the fsuid, each unless the thread has it already ([`FSGID`],
/// [`FSUID`]).
fn set_fs_ids(uid: u32, gid: u32) {
    if FSGID.with(std::cell::Cell::get) != Some(gid) {
        set_fs_gid(gid);
    }
    set_fs_uid(uid);
}

fn set_fs_gid(gid: u32) {
    let _ = Gid::from_raw(gid);
    #[cfg(test)]
    SETFSGID_CALLS.with(|n| n.set(n.get() + 1));
    // SAFETY: setfsgid takes a plain integer and touches only the calling thread's
    // credentials (glibc issues the raw per-thread system call).
    unsafe { libc::setfsgid(gid) };
    FSGID.with(|g| g.set(Some(gid)));
}

/// Sets the fsuid unless the thread has it already ([`FSUID`]): a root caller
/// exported with `no_root_squash` (fsuid 0, the server's own) then costs no system
/// call entering or leaving. Setting the fsuid the thread has changes nothing: the
/// capabilities it raises or drops follow from the old and new ids, which are equal.
fn set_fs_uid(uid: u32) {
    if FSUID.with(std::cell::Cell::get) == Some(uid) {
        return;
    }
    let _ = Uid::from_raw(uid);
    #[cfg(test)]
    SETFSUID_CALLS.with(|n| n.set(n.get() + 1));
    // SAFETY: as `set_fs_gid`, for setfsuid.
    unsafe { libc::setfsuid(uid) };
    FSUID.with(|u| u.set(Some(uid)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails the test unless it runs as root: only root can switch identities, which
    /// these tests check (scripts/test-all runs them as root).
    fn require_root() {
        assert!(
            switching(),
            "this test switches the thread's identity: run it as root, as scripts/test-all does"
        );
    }

    /// The thread's file-system uid (`setfsuid` with an invalid id changes nothing and
    /// returns the current one).
    fn fsuid() -> u32 {
        // SAFETY: setfsuid with an invalid id only reads the calling thread's fsuid.
        unsafe { libc::setfsuid(u32::MAX) as u32 }
    }

    /// The thread's file-system gid (as [`fsuid`]).
    fn fsgid() -> u32 {
        // SAFETY: setfsgid with an invalid id only reads the calling thread's fsgid.
        unsafe { libc::setfsgid(u32::MAX) as u32 }
    }

    /// The thread's supplementary groups, sorted.
    fn groups() -> Vec<u32> {
        let mut g: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        g.sort_unstable();
        g
    }

    fn setgroups_calls() -> usize {
        SETGROUPS_CALLS.with(|n| n.get())
    }

    fn setfsgid_calls() -> usize {
        SETFSGID_CALLS.with(|n| n.get())
    }

    fn setfsuid_calls() -> usize {
        SETFSUID_CALLS.with(|n| n.get())
    }

    fn with_groups(uid: u32, groups: &[u32]) -> Identity {
        Identity {
            uid,
            gid: uid,
            groups: Gids::new(groups).unwrap(),
        }
    }

    fn id(uid: u32) -> Identity {
        Identity {
            uid,
            gid: uid,
            groups: Gids::default(),
        }
    }

    #[test]
    fn a_thread_that_keeps_its_identity_refuses_a_switch() {
        std::thread::spawn(|| {
            keep_identity();
            let before = fsuid();
            let tried = std::panic::catch_unwind(|| AsCaller::enter(true, &id(1000)));
            assert!(tried.is_err(), "switched an RDMA device thread's identity");
            assert_eq!((fsuid(), AsCaller::depth()), (before, 0), "nothing changed");
            assert!(!ever_switched());
            // Without switching (not root), a guard does nothing and is allowed.
            drop(AsCaller::enter(false, &id(1000)));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn nested_guards_switch_only_when_the_identity_changes() {
        // Without switching (a server not running as root), a guard does nothing.
        let g = AsCaller::enter(false, &id(1000));
        assert!(!g.active);
        drop(g);
        require_root();
        // On a thread of its own: the identity is per thread.
        std::thread::spawn(|| {
            assert_eq!(fsuid(), 0);
            let outer = AsCaller::enter(true, &id(1000));
            assert_eq!((fsuid(), AsCaller::depth()), (1000, 1));
            {
                let _same = AsCaller::enter(true, &id(1000));
                assert_eq!((fsuid(), AsCaller::depth()), (1000, 2));
                {
                    let _other = AsCaller::enter(true, &id(2000));
                    assert_eq!(fsuid(), 2000);
                }
                assert_eq!(fsuid(), 1000, "back to the enclosing identity");
            }
            assert_eq!(
                (fsuid(), AsCaller::depth()),
                (1000, 1),
                "still the caller's"
            );
            drop(outer);
            assert_eq!((fsuid(), AsCaller::depth()), (0, 0), "the server's again");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn groups_and_gid_are_set_only_when_they_differ_and_the_uid_always_comes_back() {
        require_root();
        std::thread::spawn(|| {
            let a = with_groups(1000, &[1000, 5000]);
            let b = with_groups(2000, &[2000]);
            let (calls, gid_calls) = (setgroups_calls(), setfsgid_calls());
            {
                let _g = AsCaller::enter(true, &a);
                assert_eq!((fsuid(), fsgid(), groups()), (1000, 1000, vec![1000, 5000]));
            }
            let kept = !groups_matter();
            if kept {
                // Root's capabilities: the groups and gid stay for the next call.
                assert_eq!((fsuid(), fsgid()), (0, 1000), "the server's uid again");
                assert_eq!(groups(), vec![1000, 5000]);
                assert_eq!(setgroups_calls(), calls + 1);
                assert_eq!(setfsgid_calls(), gid_calls + 1);
            } else {
                assert_eq!((fsuid(), fsgid()), (0, 0), "the server's ids again");
                assert_eq!(groups(), Vec::<u32>::new());
                assert_eq!(setgroups_calls(), calls + 2);
            }
            let (calls, gid_calls) = (setgroups_calls(), setfsgid_calls());
            {
                let _g = AsCaller::enter(true, &a);
                assert_eq!((fsuid(), fsgid(), groups()), (1000, 1000, vec![1000, 5000]));
                if kept {
                    assert_eq!(setgroups_calls(), calls, "same groups: no setgroups");
                    assert_eq!(setfsgid_calls(), gid_calls, "same gid: no setfsgid");
                }
                {
                    let _other = AsCaller::enter(true, &b);
                    assert_eq!((fsuid(), fsgid(), groups()), (2000, 2000, vec![2000]));
                }
                assert_eq!(
                    (fsuid(), fsgid(), groups()),
                    (1000, 1000, vec![1000, 5000]),
                    "back to the enclosing identity, groups included"
                );
            }
            assert_eq!((fsuid(), AsCaller::depth()), (0, 0));
            // The server's own files: its own group, whatever a caller left.
            let made = server_files(fsgid);
            assert_eq!((fsuid(), made), (0, 0));
            {
                let _none = AsCaller::enter(true, &with_groups(3000, &[]));
                assert_eq!(
                    (fsuid(), fsgid(), groups()),
                    (3000, 3000, Vec::<u32>::new())
                );
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_caller_with_the_servers_uid_costs_no_setfsuid() {
        require_root();
        std::thread::spawn(|| {
            let root = with_groups(0, &[0]);
            drop(AsCaller::enter(true, &id(1000)));
            assert_eq!(fsuid(), 0);
            let calls = setfsuid_calls();
            {
                let _g = AsCaller::enter(true, &root);
                assert_eq!(fsuid(), 0);
            }
            assert_eq!(fsuid(), 0);
            assert_eq!(setfsuid_calls(), calls, "root entering and leaving: none");
            {
                let _g = AsCaller::enter(true, &id(1000));
                assert_eq!(fsuid(), 1000, "another uid is still switched to");
                let _inner = AsCaller::enter(true, &root);
                assert_eq!(fsuid(), 0, "and back");
            }
            assert_eq!(fsuid(), 0);
            assert_eq!(setfsuid_calls(), calls + 4, "1000, 0 inside it, 1000, 0");
        })
        .join()
        .unwrap();
    }
}

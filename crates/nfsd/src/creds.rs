//! Applying AUTH_SYS credentials (RFC 5531 Appendix A) to file-system calls.
//!
//! When the server runs as root, each procedure's file-system calls run on a blocking
//! thread whose *file-system* identity (Linux `setfsuid`, `setfsgid` and the thread's
//! supplementary groups, all per-thread) is switched to the caller's for the duration
//! of the call, so the kernel does every permission check exactly as for a local
//! process of that user. Handle resolution runs as the server, as knfsd does.
//!
//! [`Squash`] maps identities first, per export and client
//! ([`crate::exports::ExportOptions::identity`]): by default (like knfsd's
//! `root_squash`) uid 0 and gid 0 become the anonymous ids; AUTH_NONE callers are
//! always anonymous.
//!
//! A server that does not run as root cannot switch identities: every call then acts
//! as the server's own user (an implicit `all_squash` to that user), which
//! [`switching`] reports so the binary can say so at startup.

use rustix::process::{Gid, Uid};

/// A file-system identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (AUTH_SYS allows 16).
    pub groups: Vec<u32>,
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
/// it restores the server's (uid 0, gid 0, no supplementary groups), or the identity
/// of an enclosing guard.
///
/// Guards nest: a guard entered while the thread already acts as the same identity
/// (a procedure that switches once around a loop whose steps switch too, such as
/// READDIRPLUS's entries) makes no system call, entering or leaving. Switching costs
/// three per direction (setgroups, setfsgid, setfsuid).
#[derive(Debug)]
#[must_use = "the identity is switched back when this guard drops"]
pub struct AsCaller {
    active: bool,
}

thread_local! {
    /// The identities the current thread acts as, innermost last (empty: the
    /// server's own).
    static ACTING_AS: std::cell::RefCell<Vec<Identity>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl AsCaller {
    /// Switches the current thread to `id` if `switching` (see [`switching`]).
    ///
    /// Only for threads that run nothing else meanwhile (tokio's blocking pool):
    /// the switch is per thread.
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

/// Makes `id` (`None`: the server's own, uid 0, gid 0, no supplementary groups) the
/// thread's file-system identity.
fn switch_to(id: Option<&Identity>) {
    match id {
        Some(id) => {
            let groups: Vec<Gid> = id.groups.iter().map(|&g| Gid::from_raw(g)).collect();
            // Order: groups and gid while we still hold CAP_SETGID, then the uid.
            let _ = rustix::thread::set_thread_groups(&groups);
            set_fs_ids(id.uid, id.gid);
        }
        None => {
            set_fs_ids(0, 0);
            let _ = rustix::thread::set_thread_groups(&[]);
        }
    }
}

fn set_fs_ids(uid: u32, gid: u32) {
    let (_, _) = (Uid::from_raw(uid), Gid::from_raw(gid));
    // SAFETY: setfsgid/setfsuid take plain integers and touch only the calling
    // thread's credentials (glibc issues the raw per-thread system call).
    unsafe {
        libc::setfsgid(gid);
        libc::setfsuid(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's file-system uid (`setfsuid` with an invalid id changes nothing and
    /// returns the current one).
    fn fsuid() -> u32 {
        // SAFETY: setfsuid with an invalid id only reads the calling thread's fsuid.
        unsafe { libc::setfsuid(u32::MAX) as u32 }
    }

    fn id(uid: u32) -> Identity {
        Identity {
            uid,
            gid: uid,
            groups: vec![],
        }
    }

    #[test]
    fn nested_guards_switch_only_when_the_identity_changes() {
        if !switching() {
            // Not root: nothing can be switched, and the guards do nothing.
            let g = AsCaller::enter(false, &id(1000));
            assert!(!g.active);
            return;
        }
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
}

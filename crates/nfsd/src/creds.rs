//! Applying AUTH_SYS credentials (RFC 5531 Appendix A) to file-system calls.
//!
//! When the server runs as root, each procedure's file-system calls run on a blocking
//! thread whose *file-system* identity (Linux `setfsuid`, `setfsgid` and the thread's
//! supplementary groups, all per-thread) is switched to the caller's for the duration
//! of the call, so the kernel does every permission check exactly as for a local
//! process of that user. Handle resolution runs as the server, as knfsd does.
//!
//! [`Squash`] maps identities first: by default (like knfsd's `root_squash`) uid 0 and
//! gid 0 become the anonymous ids; AUTH_NONE callers are always anonymous.
//!
//! A server that does not run as root cannot switch identities: every call then acts
//! as the server's own user (an implicit `all_squash` to that user), which
//! [`Policy::switching`] reports so the binary can say so at startup.

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

/// The identity policy of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The squash mode.
    pub squash: Squash,
    /// Anonymous user id (65534, `nobody`, by default).
    pub anon_uid: u32,
    /// Anonymous group id.
    pub anon_gid: u32,
    /// Whether identities are switched (the server runs as root).
    pub switching: bool,
}

impl Policy {
    /// A policy; switching is on when the process's effective uid is 0.
    pub fn new(squash: Squash, anon_uid: u32, anon_gid: u32) -> Self {
        Policy {
            squash,
            anon_uid,
            anon_gid,
            switching: rustix::process::geteuid().is_root(),
        }
    }

    /// The identity a call acts as, from its AUTH_SYS uid, gid and groups
    /// (`None` for AUTH_NONE).
    pub fn identity(&self, sys: Option<(u32, u32, &[u32])>) -> Identity {
        let anon = Identity {
            uid: self.anon_uid,
            gid: self.anon_gid,
            groups: Vec::new(),
        };
        let Some((uid, gid, groups)) = sys else {
            return anon;
        };
        match self.squash {
            Squash::All => anon,
            Squash::None => Identity {
                uid,
                gid,
                groups: groups.to_vec(),
            },
            Squash::Root => Identity {
                uid: if uid == 0 { self.anon_uid } else { uid },
                gid: if gid == 0 { self.anon_gid } else { gid },
                groups: groups
                    .iter()
                    .map(|&g| if g == 0 { self.anon_gid } else { g })
                    .collect(),
            },
        }
    }
}

/// While alive, the current thread's file-system identity is the caller's. Dropping
/// it restores the server's (uid 0, gid 0, no supplementary groups).
#[derive(Debug)]
#[must_use = "the identity is switched back when this guard drops"]
pub struct AsCaller {
    active: bool,
}

impl AsCaller {
    /// Switches the current thread to `id`, if the policy switches at all.
    ///
    /// Only for threads that run nothing else meanwhile (tokio's blocking pool):
    /// the switch is per thread.
    pub fn enter(policy: &Policy, id: &Identity) -> Self {
        if !policy.switching {
            return AsCaller { active: false };
        }
        let groups: Vec<Gid> = id.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        // Order: groups and gid while we still hold CAP_SETGID, then the uid.
        let _ = rustix::thread::set_thread_groups(&groups);
        set_fs_ids(id.uid, id.gid);
        AsCaller { active: true }
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if self.active {
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

    fn policy(squash: Squash) -> Policy {
        Policy {
            squash,
            anon_uid: 65534,
            anon_gid: 65534,
            switching: false,
        }
    }

    #[test]
    fn root_squash_maps_only_root() {
        let p = policy(Squash::Root);
        assert_eq!(p.identity(Some((0, 0, &[0, 5]))).uid, 65534);
        assert_eq!(p.identity(Some((0, 0, &[0, 5]))).groups, vec![65534, 5]);
        assert_eq!(p.identity(Some((1000, 100, &[]))).uid, 1000);
        assert_eq!(p.identity(None).uid, 65534);
    }

    #[test]
    fn all_squash_and_no_squash() {
        assert_eq!(
            policy(Squash::All).identity(Some((1000, 1000, &[]))).uid,
            65534
        );
        assert_eq!(policy(Squash::None).identity(Some((0, 0, &[]))).uid, 0);
    }
}

//! `owner` and `owner_group` strings (RFC 8881 §5.9) to and from the numeric ids the
//! file layer uses.
//!
//! §5.9: the attributes are strings of the form `user@dns_domain`; "owner and group
//! strings that consist of decimal numeric values with no leading zeros can be given
//! a special interpretation" (the id itself), which a server may answer when it has
//! no translation, and NFS4ERR_BADOWNER is the answer to a string the server cannot
//! map.
//!
//! Without an ID-mapping domain (the default, `--idmap-domain` unset) only the
//! numeric form is used, both ways: what knfsd answers AUTH_SYS clients with its
//! `nfs4_disable_idmapping` default, and what the Linux client sends then. With a
//! domain, an id with a name in the system's user or group database (NSS:
//! `/etc/passwd`, LDAP, ...) is answered as `name@domain`, one without as its number;
//! from the client, `name@domain` (the domain compared without regard to case, as DNS
//! names are) is looked up by name and a numeric string taken as the id, anything
//! else being NFS4ERR_BADOWNER. Clients and server must then agree on the domain
//! (`Domain` in the client's `/etc/idmapd.conf`).
//!
//! Lookups go to NSS, which may read files or ask a directory server, so answers are
//! kept for [`CACHE_TTL`] (nfsidmap's default key lifetime), positive and negative
//! alike, at most [`CACHE_ENTRIES`] of them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nfs4::NfsStat4;
use nix::unistd::{Gid, Group, Uid, User};

/// How long a looked-up name or id is kept: nfsidmap's default (600 s).
pub const CACHE_TTL: Duration = Duration::from_secs(600);
/// The most names and ids kept (of users and groups together); past it the cache
/// starts over.
pub const CACHE_ENTRIES: usize = 4096;

/// Users (`owner`) or groups (`owner_group`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `owner`: uids and user names.
    User,
    /// `owner_group`: gids and group names.
    Group,
}

/// Where names come from: the system's database, or a table (tests).
pub trait Directory: Send + Sync + std::fmt::Debug {
    /// The name of `id`, if it has one.
    fn name_of(&self, kind: Kind, id: u32) -> Option<String>;
    /// The id of `name`, if it names one.
    fn id_of(&self, kind: Kind, name: &str) -> Option<u32>;
}

/// The system's user and group database through NSS (`getpwuid_r` and kin).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemDirectory;

impl Directory for SystemDirectory {
    fn name_of(&self, kind: Kind, id: u32) -> Option<String> {
        match kind {
            Kind::User => User::from_uid(Uid::from_raw(id)).ok()?.map(|u| u.name),
            Kind::Group => Group::from_gid(Gid::from_raw(id)).ok()?.map(|g| g.name),
        }
    }

    fn id_of(&self, kind: Kind, name: &str) -> Option<u32> {
        match kind {
            Kind::User => User::from_name(name).ok()?.map(|u| u.uid.as_raw()),
            Kind::Group => Group::from_name(name).ok()?.map(|g| g.gid.as_raw()),
        }
    }
}

/// The server's mapping (module docs).
#[derive(Debug)]
pub struct IdMap {
    /// The ID-mapping domain; `None`: numeric strings only.
    domain: Option<String>,
    directory: Box<dyn Directory>,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    names: HashMap<(Kind, u32), (Option<String>, Instant)>,
    ids: HashMap<(Kind, String), (Option<u32>, Instant)>,
}

impl Cache {
    fn make_room(&mut self) {
        if self.names.len() + self.ids.len() >= CACHE_ENTRIES {
            self.names.clear();
            self.ids.clear();
        }
    }
}

/// The numeric form of §5.9: decimal, no leading zeros, fits 32 bits.
fn numeric(s: &str) -> Option<u32> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

impl IdMap {
    /// Numeric strings only (no domain).
    pub fn numeric() -> IdMap {
        IdMap::new(None, Box::new(SystemDirectory))
    }

    /// Names in `domain` from `directory`, or numeric strings only without a domain.
    /// An empty domain is none.
    pub fn new(domain: Option<String>, directory: Box<dyn Directory>) -> IdMap {
        IdMap {
            domain: domain.filter(|d| !d.is_empty()),
            directory,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The ID-mapping domain, if names are used.
    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// The string for `id` (GETATTR, READDIR, VERIFY).
    pub fn to_string(&self, kind: Kind, id: u32) -> String {
        let Some(domain) = &self.domain else {
            return id.to_string();
        };
        match self.name_of(kind, id, Instant::now()) {
            Some(name) => format!("{name}@{domain}"),
            None => id.to_string(),
        }
    }

    /// Encodes the string for `id` (GETATTR, READDIR) as `to_string` makes it; a
    /// numeric one, the default, without allocating (two per GETATTR otherwise).
    pub fn encode(&self, e: &mut xdr::Encoder, kind: Kind, id: u32) {
        if self.domain.is_some() {
            e.string(self.to_string(kind, id).as_bytes());
        } else {
            e.string(decimal(id, &mut [0; 10]));
        }
    }

    /// The id `s` names (SETATTR, CREATE's and OPEN's attributes), or
    /// NFS4ERR_BADOWNER.
    pub fn to_id(&self, kind: Kind, s: &[u8]) -> Result<u32, NfsStat4> {
        let s = std::str::from_utf8(s).map_err(|_| NfsStat4::NFS4ERR_BADOWNER)?;
        if let Some(id) = numeric(s) {
            return Ok(id);
        }
        let (Some(domain), Some((name, theirs))) = (&self.domain, s.rsplit_once('@')) else {
            return Err(NfsStat4::NFS4ERR_BADOWNER);
        };
        if name.is_empty() || !theirs.eq_ignore_ascii_case(domain) {
            return Err(NfsStat4::NFS4ERR_BADOWNER);
        }
        self.id_of(kind, name, Instant::now())
            .ok_or(NfsStat4::NFS4ERR_BADOWNER)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        // Entries are whole when inserted: a poisoned cache is still right.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn name_of(&self, kind: Kind, id: u32, now: Instant) -> Option<String> {
        if let Some((name, at)) = self.cache().names.get(&(kind, id)) {
            if now.duration_since(*at) < CACHE_TTL {
                return name.clone();
            }
        }
        // Not under the lock: NSS may be slow.
        let name = self.directory.name_of(kind, id);
        let mut cache = self.cache();
        cache.make_room();
        cache.names.insert((kind, id), (name.clone(), now));
        name
    }

    fn id_of(&self, kind: Kind, name: &str, now: Instant) -> Option<u32> {
        if let Some((id, at)) = self.cache().ids.get(&(kind, name.to_owned())) {
            if now.duration_since(*at) < CACHE_TTL {
                return *id;
            }
        }
        let id = self.directory.id_of(kind, name);
        let mut cache = self.cache();
        cache.make_room();
        cache.ids.insert((kind, name.to_owned()), (id, now));
        id
    }
}

/// `id` in decimal, written at the end of `buf`.
fn decimal(id: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    let mut n = id;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// alice is uid 1000, staff gid 50; counts lookups.
    #[derive(Debug, Default)]
    struct Table(Arc<AtomicUsize>);

    impl Directory for Table {
        fn name_of(&self, kind: Kind, id: u32) -> Option<String> {
            self.0.fetch_add(1, Ordering::Relaxed);
            match (kind, id) {
                (Kind::User, 1000) => Some("alice".into()),
                (Kind::Group, 50) => Some("staff".into()),
                _ => None,
            }
        }
        fn id_of(&self, kind: Kind, name: &str) -> Option<u32> {
            self.0.fetch_add(1, Ordering::Relaxed);
            match (kind, name) {
                (Kind::User, "alice") => Some(1000),
                (Kind::Group, "staff") => Some(50),
                _ => None,
            }
        }
    }

    fn in_domain() -> (IdMap, Arc<AtomicUsize>) {
        let t = Table::default();
        let lookups = t.0.clone();
        (IdMap::new(Some("example.org".into()), Box::new(t)), lookups)
    }

    #[test]
    fn without_a_domain_only_numbers_are_used_both_ways() {
        let m = IdMap::new(None, Box::new(Table::default()));
        assert_eq!(m.to_string(Kind::User, 1000), "1000");
        for id in [0, 7, 10, 1000, 65534, u32::MAX] {
            let mut e = xdr::Encoder::new();
            m.encode(&mut e, Kind::User, id);
            let mut want = xdr::Encoder::new();
            want.string(id.to_string().as_bytes());
            assert_eq!(e.finish().inline, want.finish().inline, "{id}");
        }
        assert_eq!(m.to_id(Kind::User, b"1000"), Ok(1000));
        assert_eq!(
            m.to_id(Kind::User, b"alice@example.org"),
            Err(NfsStat4::NFS4ERR_BADOWNER)
        );
        assert_eq!(
            m.to_id(Kind::User, b"alice"),
            Err(NfsStat4::NFS4ERR_BADOWNER)
        );
        // An empty domain is none.
        let m = IdMap::new(Some(String::new()), Box::new(Table::default()));
        assert_eq!(
            (m.domain(), m.to_string(Kind::Group, 50)),
            (None, "50".into())
        );
    }

    #[test]
    fn with_a_domain_known_ids_are_names_and_others_numbers() {
        let (m, _) = in_domain();
        assert_eq!(m.to_string(Kind::User, 1000), "alice@example.org");
        assert_eq!(m.to_string(Kind::Group, 50), "staff@example.org");
        // A uid with no name, and a gid whose number a user has.
        assert_eq!(m.to_string(Kind::User, 1001), "1001");
        assert_eq!(m.to_string(Kind::Group, 1000), "1000");
    }

    #[test]
    fn with_a_domain_names_in_it_and_numbers_are_taken() {
        let (m, _) = in_domain();
        assert_eq!(m.to_id(Kind::User, b"alice@example.org"), Ok(1000));
        assert_eq!(m.to_id(Kind::User, b"alice@EXAMPLE.Org"), Ok(1000));
        assert_eq!(m.to_id(Kind::Group, b"staff@example.org"), Ok(50));
        assert_eq!(m.to_id(Kind::User, b"4242"), Ok(4242));
        assert_eq!(m.to_id(Kind::User, b"0"), Ok(0));
    }

    #[test]
    fn what_cannot_be_mapped_is_badowner() {
        let (m, _) = in_domain();
        for s in [
            &b"alice@other.org"[..],
            b"bob@example.org",
            b"staff@example.org", // a group, as an owner
            b"alice",
            b"@example.org",
            b"007",
            b"+7",
            b"4294967296",
            b"",
            b"\xff@example.org",
        ] {
            assert_eq!(
                m.to_id(Kind::User, s),
                Err(NfsStat4::NFS4ERR_BADOWNER),
                "{s:?}"
            );
        }
    }

    #[test]
    fn answers_are_kept_positive_and_negative() {
        let (m, lookups) = in_domain();
        for _ in 0..3 {
            m.to_string(Kind::User, 1000);
            m.to_string(Kind::User, 1001);
            let _ = m.to_id(Kind::User, b"bob@example.org");
        }
        assert_eq!(lookups.load(Ordering::Relaxed), 3);
        // Past the TTL, asked again.
        let later = Instant::now() + CACHE_TTL;
        assert_eq!(m.name_of(Kind::User, 1000, later).as_deref(), Some("alice"));
        assert_eq!(lookups.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn the_cache_is_bounded() {
        let (m, _) = in_domain();
        for id in 0..(CACHE_ENTRIES as u32 * 2) {
            m.to_string(Kind::User, id);
        }
        let c = m.cache();
        assert!(c.names.len() + c.ids.len() <= CACHE_ENTRIES);
    }

    #[test]
    fn the_system_directory_knows_root() {
        let s = SystemDirectory;
        assert_eq!(s.name_of(Kind::User, 0).as_deref(), Some("root"));
        assert_eq!(s.id_of(Kind::Group, "root"), Some(0));
        assert_eq!(s.id_of(Kind::User, "no-such-user-here"), None);
    }
}

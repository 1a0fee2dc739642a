//! The key that authenticates our file handles, and the file that keeps it across
//! restarts.
//!
//! Every handle we issue ends in a MAC over all its other bytes ([`crate::fh`]):
//! SipHash-2-4 with its 128-bit output (Aumasson and Bernstein, "SipHash: a fast
//! short-input PRF", 2012), keyed with 128 bits. A client can then not make up a
//! handle, nor change a byte of one (its export, its inode), without the server
//! noticing before it touches the file system; the tag is compared in constant time
//! (`subtle`).
//!
//! Why SipHash: it is a pseudorandom function designed as a MAC for short messages
//! (a handle's body is 30-100 bytes), the one the Linux kernel uses for its own
//! network-facing secrets (SYN cookies, sequence numbers). Each NFS call verifies one
//! handle and many replies seal some (READDIRPLUS one per entry). HMAC-SHA-256, used
//! before, costs two SHA-256 compressions per handle: about 13,000 instructions per
//! GETATTR where the CPU has no SHA extensions (valgrind, which hides them; qemu
//! 7.2's TCG, on which the lab's guest runs, has none either: `qemu-system-x86_64
//! -accel tcg -cpu max,+sha-ni,enforce` refuses), a third of all the server's
//! user-space instructions for that call. SipHash-2-4 costs a few hundred. Handles sealed with HMAC (format version 2)
//! are answered NFS3ERR_STALE, as version 1 ones are.
//!
//! The key must outlive the process, or every handle a client holds goes stale at
//! each restart: it is kept in `<state dir>/fh.key` (default `/var/lib/nfsd-rs`),
//! 32 random bytes from the kernel, created with mode 0600 and published by a hard
//! link from a temporary file, so a crash never leaves half a key and two servers
//! starting at once end up with the same one. Removing the file revokes every handle
//! issued so far (clients get NFS3ERR_STALE and must mount again).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use siphasher::sip128::{Hasher128, SipHasher24};
use subtle::ConstantTimeEq;

/// Default directory for state kept across restarts.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nfsd-rs";

/// Name of the key file in the state directory.
pub const KEY_FILE: &str = "fh.key";

/// Length of the key file in bytes. SipHash's key is its first 16 bytes; the file
/// keeps 32 (HMAC-SHA-256's key until handle format version 3), so that a state
/// directory made before still loads.
pub const KEY_LEN: usize = 32;

/// Length of the MAC at the end of a handle: SipHash-2-4's 128-bit output.
pub const MAC_LEN: usize = 16;

/// The handle key: SipHash-2-4's 128-bit key.
#[derive(Clone)]
pub struct HandleKey {
    key: [u8; 16],
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    /// A key from its bytes.
    pub fn from_bytes(key: &[u8; KEY_LEN]) -> HandleKey {
        let mut sip = [0; 16];
        sip.copy_from_slice(&key[..16]);
        HandleKey { key: sip }
    }

    /// A fresh random key that lives as long as the process: handles die with the
    /// server (tests, benchmarks that do not restart).
    pub fn ephemeral() -> std::io::Result<HandleKey> {
        Ok(HandleKey::from_bytes(&random_key()?))
    }

    /// The key of the state directory `dir`: read from `dir/fh.key`, or made and
    /// written there (mode 0600; `dir` is created, mode 0700, if missing).
    ///
    /// Errors name the file and say what to do: a directory that cannot be created
    /// or written, a key file that cannot be read or has the wrong length.
    pub fn load_or_create(dir: &Path) -> std::io::Result<HandleKey> {
        let path = dir.join(KEY_FILE);
        let err = |what: &str, e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "file handle key {}: {what}: {e} (choose another directory with --state-dir)",
                    path.display()
                ),
            )
        };
        match read_key(&path) {
            Ok(key) => return Ok(HandleKey::from_bytes(&key)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err("cannot read it", e)),
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| err("cannot create its directory", e))?;
        let key = random_key().map_err(|e| err("no random bytes", e))?;
        publish(dir, &path, &key).map_err(|e| err("cannot write it", e))?;
        // Another server may have published its key first: use whichever is there.
        let key = read_key(&path).map_err(|e| err("cannot read it back", e))?;
        tracing::info!(path = %path.display(), "made a new file handle key");
        Ok(HandleKey::from_bytes(&key))
    }

    /// The MAC of `bytes`.
    pub fn mac(&self, bytes: &[u8]) -> [u8; MAC_LEN] {
        let mut h = SipHasher24::new_with_key(&self.key);
        std::hash::Hasher::write(&mut h, bytes);
        h.finish128().as_bytes()
    }

    /// Whether `tag` is the MAC of `bytes`, compared in constant time: as two 64-bit
    /// words (`subtle` compares a byte slice a byte at a time, behind an optimization
    /// barrier each: 520 instructions of every PUTFH's 1,560, against about 20).
    pub fn verify(&self, bytes: &[u8], tag: &[u8]) -> bool {
        let Ok(tag) = <[u8; MAC_LEN]>::try_from(tag) else {
            return false;
        };
        let (mac, tag) = (words(&self.mac(bytes)), words(&tag));
        bool::from(mac[0].ct_eq(&tag[0]) & mac[1].ct_eq(&tag[1]))
    }
}

/// A MAC as two 64-bit words.
fn words(mac: &[u8; MAC_LEN]) -> [u64; 2] {
    let (mut low, mut high) = ([0; 8], [0; 8]);
    low.copy_from_slice(&mac[..8]);
    high.copy_from_slice(&mac[8..]);
    [u64::from_le_bytes(low), u64::from_le_bytes(high)]
}

fn random_key() -> std::io::Result<[u8; KEY_LEN]> {
    // The kernel's CSPRNG (getrandom(2)'s source), through the device file so that
    // no further dependency is needed.
    let mut key = [0; KEY_LEN];
    File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

fn read_key(path: &Path) -> std::io::Result<[u8; KEY_LEN]> {
    let mut f = File::open(path)?;
    let meta = f.metadata()?;
    if meta.len() != KEY_LEN as u64 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "is {} bytes, not {KEY_LEN} (removing it makes a new key, and every handle clients hold stale)",
                meta.len()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{:o}", meta.permissions().mode() & 0o7777),
            "the file handle key is readable by others: whoever reads it can forge handles"
        );
    }
    let mut key = [0; KEY_LEN];
    f.read_exact(&mut key)?;
    Ok(key)
}

/// Writes `key` to a temporary file in `dir` (mode 0600, synced) and links it to
/// `path` unless a key is there already.
fn publish(dir: &Path, path: &Path, key: &[u8; KEY_LEN]) -> std::io::Result<()> {
    let tmp: PathBuf = dir.join(format!(".{KEY_FILE}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(key)?;
        f.sync_all()?;
        match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        File::open(dir)?.sync_all()
    })();
    let _ = std::fs::remove_file(&tmp);
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SipHash-2-4, 128-bit output: the reference vectors (veorq/SipHash
    /// `vectors.h`, `vectors_sip128`), key 00 01 .. 0f, message 00 01 .. (n-1).
    #[test]
    fn the_mac_is_siphash_2_4_128() {
        let mut file_key = [0xee; KEY_LEN];
        for (i, b) in file_key[..16].iter_mut().enumerate() {
            *b = i as u8;
        }
        let k = HandleKey::from_bytes(&file_key);
        let msg: Vec<u8> = (0..3).collect();
        let want: [[u8; 16]; 3] = [
            [
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93,
            ],
            [
                0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22,
                0xfc, 0x45,
            ],
            [
                0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a,
                0xff, 0xe4,
            ],
        ];
        for (n, want) in want.iter().enumerate() {
            assert_eq!(&k.mac(&msg[..n]), want, "message of {n} bytes");
            assert!(k.verify(&msg[..n], want));
            let mut bad = *want;
            bad[15] ^= 1;
            assert!(!k.verify(&msg[..n], &bad));
            assert!(!k.verify(&msg[..n], &want[..15]));
        }
    }

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nfsd-key-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn the_key_is_made_once_private_and_read_back() {
        let dir = temp("once");
        let state = dir.join("state");
        let a = HandleKey::load_or_create(&state).unwrap();
        let meta = std::fs::metadata(state.join(KEY_FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), KEY_LEN as u64);
        assert_eq!(
            std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // A restart reads the same key: same MACs.
        let b = HandleKey::load_or_create(&state).unwrap();
        assert_eq!(a.mac(b"handle"), b.mac(b"handle"));
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_key_file_is_a_clear_error() {
        let dir = temp("bad");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(KEY_FILE), b"short").unwrap();
        let e = HandleKey::load_or_create(&dir).unwrap_err().to_string();
        assert!(
            e.contains("fh.key") && e.contains("is 5 bytes, not 32"),
            "{e}"
        );
        // A state directory that is a file cannot hold a key.
        let file = dir.join("plain");
        std::fs::write(&file, b"").unwrap();
        let e = HandleKey::load_or_create(&file).unwrap_err().to_string();
        assert!(
            e.contains("plain/fh.key") && e.contains("--state-dir"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_tag_off_in_any_byte_or_of_another_length_does_not_verify() {
        let k = HandleKey::from_bytes(&[7; KEY_LEN]);
        let bytes = b"a handle's bytes";
        let tag = k.mac(bytes);
        assert!(k.verify(bytes, &tag));
        for i in 0..MAC_LEN {
            let mut bad = tag;
            bad[i] ^= 0x01;
            assert!(!k.verify(bytes, &bad), "byte {i} flipped");
        }
        assert!(!k.verify(bytes, &tag[..MAC_LEN - 1]));
        assert!(!k.verify(bytes, &[tag.as_slice(), &[0]].concat()));
        assert!(!k.verify(b"another handle's", &tag));
    }

    #[test]
    fn macs_depend_on_key_and_every_byte() {
        let k = HandleKey::from_bytes(&[7; KEY_LEN]);
        let other = HandleKey::from_bytes(&[8; KEY_LEN]);
        let tag = k.mac(b"abc");
        assert!(k.verify(b"abc", &tag));
        assert!(!k.verify(b"abd", &tag));
        assert!(!other.verify(b"abc", &tag));
        assert!(!k.verify(b"abc", &tag[..MAC_LEN - 1]));
        let mut bad = tag;
        bad[MAC_LEN - 1] ^= 1;
        assert!(!k.verify(b"abc", &bad));
    }
}

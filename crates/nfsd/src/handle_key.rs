//! The key that authenticates our file handles, and the file that keeps it across
//! restarts.
//!
//! Every handle we issue ends in a MAC over all its other bytes ([`crate::fh`]):
//! HMAC-SHA-256 (RFC 2104, FIPS 198-1) under a 256-bit key, truncated to its leftmost
//! 128 bits (RFC 2104 §5 recommends keeping at least half the output, and 80 bits). A client
//! can then not make up a handle, nor change a byte of one (its export, its inode),
//! without the server noticing before it touches the file system, and the check is
//! done in constant time (`hmac`'s `verify_truncated_left` compares with `subtle`).
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

use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// Default directory for state kept across restarts.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nfsd-rs";

/// Name of the key file in the state directory.
pub const KEY_FILE: &str = "fh.key";

/// Key length in bytes (HMAC-SHA-256's block-sized keys are longer; 32 bytes is its
/// output size and all the strength SHA-256 gives).
pub const KEY_LEN: usize = 32;

/// Length of the MAC at the end of a handle: HMAC-SHA-256 truncated to 128 bits.
pub const MAC_LEN: usize = 16;

/// The handle key, ready to MAC (the HMAC's keyed state is computed once).
#[derive(Clone)]
pub struct HandleKey {
    mac: hmac::Hmac<Sha256>,
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
        HandleKey {
            mac: hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length"),
        }
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

    /// The MAC of `bytes`, truncated to [`MAC_LEN`].
    pub fn mac(&self, bytes: &[u8]) -> [u8; MAC_LEN] {
        let mut m = self.mac.clone();
        m.update(bytes);
        let full = m.finalize().into_bytes();
        let mut out = [0; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    /// Whether `tag` is the MAC of `bytes`, compared in constant time.
    pub fn verify(&self, bytes: &[u8], tag: &[u8]) -> bool {
        if tag.len() != MAC_LEN {
            return false;
        }
        let mut m = self.mac.clone();
        m.update(bytes);
        m.verify_truncated_left(tag).is_ok()
    }
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
        // RFC 4231 test case 2: HMAC-SHA-256 with key "Jefe", truncated.
        let jefe = hmac::Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        let k = HandleKey { mac: jefe };
        assert_eq!(
            k.mac(b"what do ya want for nothing?"),
            [
                0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95,
                0x75, 0xc7
            ]
        );
    }
}

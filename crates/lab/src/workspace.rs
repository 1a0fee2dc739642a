//! Host-side helpers the scenarios share: building one of the workspace's binaries to
//! run beside (or inside) the guest, and making and checking test data.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds binary `bin` of workspace package `package` (debug profile, the same cargo
/// that runs the tests) and returns the executable's path.
///
/// # Panics
/// If the build fails or cargo does not name the executable: a scenario cannot run
/// without its binary, and the panic message carries cargo's stderr.
pub fn build_binary(package: &str, bin: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "-p",
            package,
            "--bin",
            bin,
            "--message-format=json",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cargo build -p {package}: {e}"));
    assert!(
        out.status.success(),
        "cargo build -p {package} --bin {bin} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("\"name\":\"{bin}\"");
    let text = String::from_utf8_lossy(&out.stdout);
    let exe = text
        .lines()
        .filter(|l| l.contains(&name) && l.contains("\"executable\":\""))
        .find_map(|l| {
            let rest = &l[l.find("\"executable\":\"")? + 14..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .unwrap_or_else(|| panic!("no {bin} executable in cargo's output"));
    PathBuf::from(exe)
}

/// `len` pseudo-random bytes from `seed` (xorshift): incompressible, reproducible,
/// and different for each seed, so a misplaced block cannot go unnoticed.
pub fn pattern(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The md5 of a file as `md5sum` prints it (the guest side uses `md5sum` too, so both
/// sides are compared with the same tool). Empty if `md5sum` fails.
pub fn md5_file(path: &Path) -> String {
    let out = Command::new("md5sum")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("md5sum {}: {e}", path.display()));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_reproducible_and_seed_dependent() {
        assert_eq!(pattern(64, 3), pattern(64, 3));
        assert_ne!(pattern(64, 3), pattern(64, 4));
        assert_eq!(pattern(0, 1), Vec::<u8>::new());
    }

    #[test]
    fn md5_of_an_empty_file_is_the_known_digest() {
        let p = std::env::temp_dir().join(format!("lab-md5-{}", std::process::id()));
        std::fs::write(&p, b"").unwrap();
        assert_eq!(md5_file(&p), "d41d8cd98f00b204e9800998ecf8427e");
        let _ = std::fs::remove_file(&p);
    }
}

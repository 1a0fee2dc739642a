//! Host-side helpers the scenarios share: building one of the workspace's binaries to
//! run beside (or inside) the guest, and making and checking test data.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Outcome;

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

/// The host-side checks shared by the NFS copy scenarios (`nfs_tcp`, `nfs_rdma`), whose
/// guest scripts copy `in-<n>` files into the export, rename and remove `in-1`, make a
/// symlink to `d1moved/d2/renamed` and list a directory of `entries` files, then clean up:
/// each guest-written file matches on the host, the symlink and listing were seen, and
/// the export holds exactly the host's and the guest's files.
pub fn check_nfs_copy_tree(o: &mut Outcome, export: &Path, sizes: &[u64], entries: usize) {
    o.host_step("copies_in_match_on_host", |o| {
        for &n in sizes {
            let guest = o.value(&format!("md5:/tmp/f{n}")).unwrap_or("missing");
            // in-1 was renamed and removed by the script; the others stay.
            if n == 1 {
                continue;
            }
            let host = md5_file(&export.join(format!("in-{n}")));
            if guest != host {
                return Err(format!("in-{n}: guest wrote md5 {guest}, host has {host}"));
            }
        }
        Ok(())
    });
    o.host_step("symlink_and_listing", |o| {
        let many = entries.to_string();
        match (o.value("readlink"), o.value("many")) {
            (Some("d1moved/d2/renamed"), Some(n)) if n == many => Ok(()),
            other => Err(format!("readlink / ls count: {other:?}")),
        }
    });
    o.host_step("tree_cleaned_up", |_| {
        let mut left: Vec<String> = std::fs::read_dir(export)
            .map_err(|e| e.to_string())?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        left.sort();
        let mut want: Vec<String> = sizes
            .iter()
            .flat_map(|n| [format!("from-host-{n}"), format!("in-{n}")])
            .filter(|f| f != "in-1")
            .collect();
        want.sort();
        if left == want {
            Ok(())
        } else {
            Err(format!("export holds {left:?}, expected {want:?}"))
        }
    });
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

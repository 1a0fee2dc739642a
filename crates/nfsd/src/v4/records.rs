//! The NFSv4.1 client records kept across restarts ([`super::state::grace`]): the
//! `co_ownerid` of every client that completed its reclaim and is still there, one
//! per line in hexadecimal, in `nfs4-clients` in the state directory (beside the
//! handle key and the NSM state). Rewritten whole on each change: written to a
//! temporary file, synced, renamed over the old one, so that a crash leaves the old
//! set or the new one, never half of either.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE: &str = "nfs4-clients";

/// Where the records are kept (or nowhere: a server without a state directory, whose
/// clients cannot reclaim after a restart).
#[derive(Debug, Default)]
pub struct Records {
    path: Option<PathBuf>,
}

impl Records {
    /// Records kept nowhere.
    pub fn none() -> Records {
        Records { path: None }
    }

    /// The records in `dir` (made if missing) and the owners the previous run left.
    /// Lines that are not hexadecimal are skipped (a file written by hand).
    pub fn open(dir: &Path) -> std::io::Result<(Records, HashSet<Vec<u8>>)> {
        crate::creds::server_files(|| std::fs::create_dir_all(dir))?;
        let path = dir.join(FILE);
        let previous = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().filter_map(unhex).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashSet::new(),
            Err(e) => return Err(e),
        };
        Ok((Records { path: Some(path) }, previous))
    }

    /// Replaces the records with `owners`.
    pub fn save(&self, owners: &HashSet<Vec<u8>>) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut lines: Vec<String> = owners.iter().map(|o| hex(o)).collect();
        lines.sort();
        let tmp = path.with_extension("tmp");
        // The server's own file, of its own group (`creds::server_files`).
        crate::creds::server_files(|| {
            let mut f = std::fs::File::create(&tmp)?;
            for l in &lines {
                writeln!(f, "{l}")?;
            }
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.is_empty() || s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_restart_and_bad_lines_are_skipped() {
        let dir = std::env::temp_dir().join(format!("nfsd-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (r, prev) = Records::open(&dir).unwrap();
        assert!(prev.is_empty());
        let owners: HashSet<Vec<u8>> = [b"Linux NFSv4.1 guest".to_vec(), vec![0, 255, 10]].into();
        r.save(&owners).unwrap();
        let mut text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        text.push_str("not hex\nabc\n");
        std::fs::write(dir.join(FILE), text).unwrap();
        let (_, again) = Records::open(&dir).unwrap();
        assert_eq!(again, owners);
        Records::none().save(&owners).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

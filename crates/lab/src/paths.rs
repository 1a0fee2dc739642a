//! Where the lab lives: the repo's `lab/` directory and the manifest that
//! `lab/setup` writes into `lab/cache/lab.env`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{GuestConfig, GuestScript, LabError};

/// A set-up lab: the guest kernel and initramfs built by `lab/setup`, and the
/// host tools (qemu, tshark) it found.
#[derive(Debug, Clone)]
pub struct Lab {
    pub(crate) lab_dir: PathBuf,
    pub(crate) out_root: PathBuf,
    pub(crate) kernel: PathBuf,
    pub(crate) initrd: PathBuf,
    pub(crate) qemu: PathBuf,
    tshark: PathBuf,
    kv: String,
    kv_pinned: String,
    /// The minimal Debian with systemd for the package scenario, if setup made it.
    service_root: Option<PathBuf>,
}

impl Lab {
    /// Open the lab of this repository (`lab/` two levels above this crate,
    /// or `$LAB_DIR`). Fails with [`LabError::NotSetUp`] when `lab/setup`
    /// has not completed, naming what is missing.
    pub fn open() -> Result<Lab, LabError> {
        let lab_dir = match std::env::var_os("LAB_DIR") {
            Some(d) => PathBuf::from(d),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab"),
        };
        let lab = Self::open_at(&lab_dir)?;
        if lab.is_fallback_kernel() {
            // Visible in every test's output: results are from another kernel.
            eprintln!(
                "lab: WARNING: guest kernel {} is setup's fallback for the pinned {}",
                lab.kv, lab.kv_pinned
            );
        }
        Ok(lab)
    }

    /// Open the lab rooted at `lab_dir` (the directory holding `setup`).
    pub fn open_at(lab_dir: &Path) -> Result<Lab, LabError> {
        let lab_dir = lab_dir
            .canonicalize()
            .map_err(|e| LabError::NotSetUp(format!("{}: {e}", lab_dir.display())))?;
        let cache = std::env::var_os("LAB_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| lab_dir.join("cache"));
        let manifest = cache.join("lab.env");
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| LabError::NotSetUp(format!("{}: {e}", manifest.display())))?;
        let env = parse_env(&text);
        let get = |k: &str| -> Result<String, LabError> {
            env.get(k)
                .cloned()
                .ok_or_else(|| LabError::NotSetUp(format!("{} lacks {k}", manifest.display())))
        };
        let existing = |k: &str| -> Result<PathBuf, LabError> {
            let p = PathBuf::from(get(k)?);
            if p.exists() {
                Ok(p)
            } else {
                Err(LabError::NotSetUp(format!(
                    "{k}={} does not exist",
                    p.display()
                )))
            }
        };
        Ok(Lab {
            out_root: lab_dir.join("out"),
            kernel: existing("LAB_KERNEL_IMAGE")?,
            initrd: existing("LAB_INITRD")?,
            qemu: existing("LAB_QEMU")?,
            tshark: existing("LAB_TSHARK")?,
            kv: get("LAB_KV")?,
            kv_pinned: get("LAB_KV_PINNED")?,
            service_root: env.get("LAB_SERVICE_ROOT").map(PathBuf::from),
            lab_dir,
        })
    }

    /// Start configuring a guest run of `script` (fixed 2 vCPUs, 1 GiB).
    pub fn guest(&self, script: GuestScript) -> GuestConfig {
        GuestConfig::new(self.clone(), script)
    }

    /// Two guests on a wire: see [`crate::GuestPair`].
    pub fn pair(&self, server: GuestScript, client: GuestScript) -> crate::GuestPair {
        crate::GuestPair::new(self, server, client)
    }

    /// The guest kernel ABI, e.g. `6.1.0-56-amd64`.
    pub fn kernel_version(&self) -> &str {
        &self.kv
    }

    /// True when setup had to fall back from the pinned kernel.
    pub fn is_fallback_kernel(&self) -> bool {
        self.kv != self.kv_pinned
    }

    /// The minimal Debian 12 root with systemd that `lab/setup` made for booting
    /// in a container (the Debian package scenario).
    pub fn service_root(&self) -> Result<&Path, LabError> {
        match &self.service_root {
            Some(p) if p.join(".complete").exists() => Ok(p),
            _ => Err(LabError::NotSetUp(
                "no service root (LAB_SERVICE_ROOT): run lab/setup again".into(),
            )),
        }
    }

    /// The tshark binary found by setup.
    pub fn tshark(&self) -> &Path {
        &self.tshark
    }

    /// The repo's `lab/` directory.
    pub fn dir(&self) -> &Path {
        &self.lab_dir
    }

    /// Where runs leave their shares, logs and captures (`lab/out/<run>`).
    pub fn out_root(&self) -> &Path {
        &self.out_root
    }
}

/// `KEY=value` lines; `#` comments and blank lines ignored.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_manifest_parses_and_ignores_comments() {
        let m = parse_env("# c\nLAB_KV=6.1.0-56-amd64\n\nLAB_QEMU = /usr/bin/q\n");
        assert_eq!(m.get("LAB_KV").unwrap(), "6.1.0-56-amd64");
        assert_eq!(m.get("LAB_QEMU").unwrap(), "/usr/bin/q");
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn missing_manifest_is_not_set_up_with_a_hint() {
        let dir = std::env::temp_dir().join(format!("lab-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Lab::open_at(&dir).unwrap_err();
        assert!(matches!(err, LabError::NotSetUp(_)), "{err}");
        assert!(err.to_string().contains("lab/setup"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! What the guest runs: a scenario script plus its environment, host
//! binaries and extra files, all handed over through the 9p share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::LabError;

/// A guest scenario: the shell script `/init` runs from the share, with the
/// environment, binaries and files it needs.
#[derive(Debug, Clone)]
pub struct GuestScript {
    pub(crate) name: String,
    pub(crate) body: String,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) binaries: Vec<(String, PathBuf)>,
    pub(crate) files: Vec<(String, Vec<u8>)>,
    /// Host binaries whose shared libraries go to `/share/lib` (see `with_libraries`).
    pub(crate) library_closures: Vec<PathBuf>,
}

impl GuestScript {
    /// A script from `lab/scenarios/<name>.sh` (the catalogue of guest sides).
    pub fn scenario(name: &str) -> Result<GuestScript, LabError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../lab/scenarios")
            .join(format!("{name}.sh"));
        let body = std::fs::read_to_string(&path).map_err(|_| LabError::NotFound(path.clone()))?;
        Ok(Self::inline(name, body))
    }

    /// A script given as text; it should start with `. /share/lib.sh`.
    pub fn inline(name: &str, body: impl Into<String>) -> GuestScript {
        GuestScript {
            name: name.to_string(),
            body: body.into(),
            env: BTreeMap::new(),
            binaries: Vec::new(),
            files: Vec::new(),
            library_closures: Vec::new(),
        }
    }

    /// Export `key=value` to the script (e.g. `LAB_SIW=patched`).
    pub fn env(mut self, key: &str, value: impl Into<String>) -> GuestScript {
        self.env.insert(key.to_string(), value.into());
        self
    }

    /// Copy a host binary to `/share/bin/<name>` (run it with
    /// `lab_run_binary <name> ARGS` or directly). The initramfs carries the
    /// host's libc, libgcc_s, libm and friends, so a binary built by cargo on
    /// this host runs in the guest as is.
    pub fn binary(mut self, name: &str, host_path: impl Into<PathBuf>) -> GuestScript {
        self.binaries.push((name.to_string(), host_path.into()));
        self
    }

    /// Copy a host binary to `/share/bin/<name>` as `binary` does, and the shared
    /// libraries it needs (its `ldd` closure on the host, less the libc family the
    /// initramfs already carries) to `/share/lib`: for a host tool the initramfs does
    /// not carry, such as fio (whose Debian build links ceph, gluster and nbd
    /// libraries: ~80 MB, too much for every boot). Run it as
    /// `LD_LIBRARY_PATH=/share/lib /share/bin/<name>`. The libraries are hard links
    /// when the out directory shares the host's file system, copies otherwise.
    pub fn binary_with_libraries(self, name: &str, host_path: impl Into<PathBuf>) -> GuestScript {
        let host_path = host_path.into();
        let mut s = self.binary(name, host_path.clone());
        s.library_closures.push(host_path);
        s
    }

    /// Put a file at `/share/<rel>` (rel must not escape the share).
    pub fn file(mut self, rel: &str, contents: impl Into<Vec<u8>>) -> GuestScript {
        self.files.push((rel.to_string(), contents.into()));
        self
    }

    /// The scenario name; also names the run's directory under `lab/out/`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/share/env.sh` as `/init` sources it.
    pub(crate) fn env_sh(&self) -> String {
        self.env
            .iter()
            .map(|(k, v)| format!("export {k}={}\n", shell_quote(v)))
            .collect()
    }
}

/// Single-quote `s` for sh.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_exported_and_quoted() {
        let s = GuestScript::inline("x", "").env("A", "it's").env("B", "1");
        assert_eq!(s.env_sh(), "export A='it'\\''s'\nexport B='1'\n");
    }

    #[test]
    fn shipped_scenarios_load_and_use_lib() {
        for name in ["kclient-mount", "knfsd-hold"] {
            let s = GuestScript::scenario(name).unwrap();
            assert!(s.body.contains(". /share/lib.sh"), "{name}");
        }
        assert!(matches!(
            GuestScript::scenario("no-such-scenario"),
            Err(LabError::NotFound(_))
        ));
    }
}

//! `fs-meta`: one phase of the metadata workload of `nfsbench lab --metadata N`
//! (issue 17), run in the lab guest on a kernel NFS mount. Standard library only.
//!
//! Usage: `fs-meta PHASE DIR N`, PHASE one of
//! - `create`: create (open `O_WRONLY|O_CREAT`, no `O_EXCL`, no `O_TRUNC`) and close
//!   `N` empty files `DIR/f00000`.. (DIR must exist);
//! - `stat`: `stat` each of them;
//! - `open`: open each read-only and close it;
//! - `list`: read the directory `DIR` (names only: `getdents`, no `stat`) and check
//!   it holds exactly those `N` names;
//! - `remove`: unlink each.
//!
//! It prints one line, `fs-meta PHASE N SECS` (monotonic seconds over the phase's
//! calls, process start excluded), and exits 1 with the failing call on an error.
//! What the kernel client sends for each phase depends on its caches (the
//! benchmark remounts between phases and reads the per-op counts of
//! `/proc/self/mountstats` around each); this program only makes the calls.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

fn name(i: u32) -> String {
    format!("f{i:05}")
}

fn phase(what: &str, dir: &Path, n: u32) -> Result<(), String> {
    let err = |op: &str, p: &Path, e: std::io::Error| format!("{op} {}: {e}", p.display());
    match what {
        "create" => {
            for i in 0..n {
                let p = dir.join(name(i));
                OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&p)
                    .map_err(|e| err("create", &p, e))?;
            }
        }
        "stat" => {
            for i in 0..n {
                let p = dir.join(name(i));
                fs::metadata(&p).map_err(|e| err("stat", &p, e))?;
            }
        }
        "open" => {
            for i in 0..n {
                let p = dir.join(name(i));
                File::open(&p).map_err(|e| err("open", &p, e))?;
            }
        }
        "list" => {
            let mut seen = HashSet::new();
            for e in fs::read_dir(dir).map_err(|e| err("opendir", dir, e))? {
                let e = e.map_err(|e| err("readdir", dir, e))?;
                seen.insert(e.file_name().to_string_lossy().into_owned());
            }
            let want: HashSet<String> = (0..n).map(name).collect();
            if seen != want {
                return Err(format!(
                    "readdir {}: {} entries, {} of the {n} expected names missing",
                    dir.display(),
                    seen.len(),
                    want.difference(&seen).count()
                ));
            }
        }
        "remove" => {
            for i in 0..n {
                let p = dir.join(name(i));
                fs::remove_file(&p).map_err(|e| err("unlink", &p, e))?;
            }
        }
        _ => return Err(format!("unknown phase {what:?}")),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fs-meta create|stat|open|list|remove DIR N";
    let (what, dir, n) = match args.as_slice() {
        [w, d, n] => match n.parse::<u32>() {
            Ok(n) if n <= 100_000 => (w.as_str(), Path::new(d), n),
            _ => {
                eprintln!("{usage} (N at most 100000)");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let t = Instant::now();
    match phase(what, dir, n) {
        Ok(()) => {
            println!("fs-meta {what} {n} {:.6}", t.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fs-meta {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

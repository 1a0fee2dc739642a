//! The metadata part of `nfsbench lab --metadata N` (issue 17): in the qemu guest the
//! kernel NFSv3 client creates, stats, opens, lists and removes `N` files through a
//! mount of knfsd and of our nfsd (and of nfs-ganesha with `--with-ganesha`),
//! interleaved; `fs-meta`
//! (crates/lab/src/bin/fs-meta.rs) makes the calls, one phase per run, and the guest
//! script reads the mount's per-op counts from `/proc/self/mountstats` before and
//! after each phase. This module parses those counts and summarises the runs.
//!
//! Phases, each on the same directory of `N` files (`f00000`..):
//! - `create`: fresh mount, fresh directory: open(`O_CREAT`)+close each;
//! - `stat`: after a remount (unmount, caches dropped, mount): `stat` each;
//! - `open`: same mount: open read-only + close each (close-to-open revalidation);
//! - `list`: after a remount: `readdir` of the directory (names only);
//! - `remove`: same mount: unlink each.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::median;

/// The phases in the order the guest runs them.
pub const PHASES: [&str; 5] = ["create", "stat", "open", "list", "remove"];

/// What each phase does, for the report.
pub fn phase_doc(phase: &str) -> &'static str {
    match phase {
        "create" => "fresh mount and directory: open(O_WRONLY|O_CREAT)+close of each file",
        "stat" => "after a remount (caches dropped): stat() of each file",
        "open" => "same mount, right after stat: open(O_RDONLY)+close of each file",
        "list" => "after a remount: readdir of the directory (names only)",
        "remove" => "same mount, right after list: unlink of each file",
        _ => "",
    }
}

/// One NFS operation's counters over a phase, from the mount's
/// `/proc/self/mountstats` per-op line (`NAME: ops trans timeouts sent recv queue rtt
/// execute errors`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpStat {
    /// Calls (requests completed).
    pub ops: u64,
    /// Summed round-trip time, ms (client's view: request sent to reply received).
    pub rtt_ms: u64,
    /// Summed execution time, ms (queued to done, in the client).
    pub execute_ms: u64,
    /// Calls that ended with an error status (e.g. a LOOKUP answered NFS3ERR_NOENT).
    pub errors: u64,
}

/// Parses the guest script's snapshot: `NAME:ops:rtt_ms:execute_ms:errors` items,
/// whitespace separated (empty: no calls yet).
pub fn parse_opstats(s: &str) -> Result<BTreeMap<String, OpStat>, String> {
    let mut m = BTreeMap::new();
    for item in s.split_whitespace() {
        let f: Vec<&str> = item.split(':').collect();
        let n = |i: usize| -> Result<u64, String> {
            f.get(i)
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| format!("bad mountstats item {item:?} in {s:?}"))
        };
        if f.len() != 5 || f[0].is_empty() {
            return Err(format!("bad mountstats item {item:?} in {s:?}"));
        }
        m.insert(
            f[0].to_string(),
            OpStat {
                ops: n(1)?,
                rtt_ms: n(2)?,
                execute_ms: n(3)?,
                errors: n(4)?,
            },
        );
    }
    Ok(m)
}

/// `after - before` per op, only the ops with calls in between.
pub fn op_delta(
    before: &BTreeMap<String, OpStat>,
    after: &BTreeMap<String, OpStat>,
) -> BTreeMap<String, OpStat> {
    after
        .iter()
        .filter_map(|(k, a)| {
            let b = before.get(k).copied().unwrap_or_default();
            let d = OpStat {
                ops: a.ops.saturating_sub(b.ops),
                rtt_ms: a.rtt_ms.saturating_sub(b.rtt_ms),
                execute_ms: a.execute_ms.saturating_sub(b.execute_ms),
                errors: a.errors.saturating_sub(b.errors),
            };
            (d.ops > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// One phase of one server in one repetition.
#[derive(Debug, Clone, Serialize)]
pub struct MetaRun {
    /// `knfsd`, `ours` or `ganesha`.
    pub server: String,
    /// Repetition.
    pub rep: u32,
    /// Phase (see [`PHASES`]).
    pub phase: String,
    /// Files (the phase makes one system call per file, `list` a readdir of them).
    pub files: u32,
    /// Seconds over the phase's system calls (fs-meta's monotonic clock in the guest).
    pub secs: f64,
    /// Guest busy CPU seconds over the phase (all vCPUs, client and server).
    pub guest_cpu_s: f64,
    /// NFS calls per op over the phase (mountstats).
    pub ops: BTreeMap<String, OpStat>,
    /// All NFS calls over the phase.
    pub calls: u64,
    /// Wall microseconds per NFS call (secs / calls).
    pub us_per_call: f64,
}

impl MetaRun {
    /// Builds a run from the guest's records: `secs_jiffies` is "SECS JIFFIES", the
    /// op snapshots as [`parse_opstats`] reads them.
    pub fn from_records(
        server: &str,
        rep: u32,
        phase: &str,
        files: u32,
        secs_jiffies: &str,
        before: &str,
        after: &str,
    ) -> Result<MetaRun, String> {
        let mut it = secs_jiffies.split_whitespace().map(str::parse::<f64>);
        let (secs, jiffies) = match (it.next(), it.next()) {
            (Some(Ok(s)), Some(Ok(j))) => (s, j),
            _ => return Err(format!("meta {server} {rep} {phase}: {secs_jiffies:?}")),
        };
        let ops = op_delta(&parse_opstats(before)?, &parse_opstats(after)?);
        let calls = ops.values().map(|o| o.ops).sum::<u64>();
        Ok(MetaRun {
            server: server.into(),
            rep,
            phase: phase.into(),
            files,
            secs,
            guest_cpu_s: jiffies / 100.0,
            us_per_call: if calls > 0 {
                secs * 1e6 / calls as f64
            } else {
                f64::NAN
            },
            ops,
            calls,
        })
    }
}

/// One server's figures for a phase (medians over repetitions).
#[derive(Debug, Clone, Serialize)]
pub struct PhaseServer {
    /// Median seconds.
    pub secs: f64,
    /// Median files per second.
    pub files_per_s: f64,
    /// Median guest CPU seconds.
    pub guest_cpu_s: f64,
    /// Median NFS calls per op (over repetitions; normally the same in each).
    pub ops: BTreeMap<String, f64>,
    /// Median NFS calls in all.
    pub calls: f64,
    /// Median wall microseconds per NFS call.
    pub us_per_call: f64,
    /// Client's mean round trip per call, per op, ms (summed rtt / calls over all
    /// repetitions).
    pub rtt_ms_per_call: BTreeMap<String, f64>,
}

/// One phase, both servers.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSummary {
    /// Phase name.
    pub phase: String,
    /// What it does.
    pub what: String,
    /// knfsd's figures.
    pub knfsd: PhaseServer,
    /// Ours.
    pub ours: PhaseServer,
    /// ours/knfsd as a speed: median over repetitions of knfsd secs / ours secs
    /// (> 1: ours faster).
    pub ours_over_knfsd_speed: f64,
    /// ours/knfsd guest CPU: median over repetitions of ours CPU s / knfsd CPU s.
    pub ours_over_knfsd_cpu: f64,
    /// nfs-ganesha's figures (`--with-ganesha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ganesha: Option<PhaseServer>,
    /// ours/ganesha as a speed: median over repetitions of ganesha secs / ours secs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_speed: Option<f64>,
    /// ours/ganesha guest CPU: median over repetitions of ours CPU s / ganesha CPU s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_cpu: Option<f64>,
}

/// The metadata runs and their summary.
#[derive(Debug, Clone, Serialize)]
pub struct Metadata {
    /// Files per run.
    pub files: u32,
    /// Per phase.
    pub phases: Vec<PhaseSummary>,
    /// ours/knfsd speed over the whole workload: median over repetitions of the
    /// summed knfsd secs of the five phases / ours'.
    pub ours_over_knfsd_speed_total: f64,
    /// ours/ganesha speed over the whole workload (`--with-ganesha`), as
    /// `ours_over_knfsd_speed_total`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_speed_total: Option<f64>,
    /// Every phase run.
    pub runs: Vec<MetaRun>,
    /// `--profile`: the runs of the extra repetition under `perf record` (`rep` is
    /// the number of measured repetitions); not part of the figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profiled_runs: Vec<MetaRun>,
}

fn server_summary(runs: &[&MetaRun]) -> PhaseServer {
    let med = |f: &dyn Fn(&MetaRun) -> f64| median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
    let mut names: Vec<&String> = runs.iter().flat_map(|r| r.ops.keys()).collect();
    names.sort();
    names.dedup();
    let ops = names
        .iter()
        .map(|n| {
            let v: Vec<f64> = runs
                .iter()
                .map(|r| r.ops.get(*n).map_or(0.0, |o| o.ops as f64))
                .collect();
            ((*n).clone(), median(&v))
        })
        .collect();
    let rtt_ms_per_call = names
        .iter()
        .filter_map(|n| {
            let (ops, rtt) = runs
                .iter()
                .filter_map(|r| r.ops.get(*n))
                .fold((0u64, 0u64), |(o, t), s| (o + s.ops, t + s.rtt_ms));
            (ops > 0).then(|| ((*n).clone(), rtt as f64 / ops as f64))
        })
        .collect();
    PhaseServer {
        secs: med(&|r| r.secs),
        files_per_s: med(&|r| r.files as f64 / r.secs),
        guest_cpu_s: med(&|r| r.guest_cpu_s),
        ops,
        calls: med(&|r| r.calls as f64),
        us_per_call: med(&|r| r.us_per_call),
        rtt_ms_per_call,
    }
}

/// Summarises the runs of `reps` repetitions.
pub fn summarise(files: u32, reps: u32, runs: Vec<MetaRun>) -> Metadata {
    let find = |s: &str, rep: u32, p: &str| {
        runs.iter()
            .find(|r| r.server == s && r.rep == rep && r.phase == p)
    };
    let with_ganesha = runs.iter().any(|r| r.server == "ganesha");
    // Medians over repetitions of other/ours secs and ours/other CPU in phase `p`.
    let ratios = |other: &str, p: &str| {
        let pairs: Vec<(&MetaRun, &MetaRun)> = (0..reps)
            .filter_map(|rep| Some((find("ours", rep, p)?, find(other, rep, p)?)))
            .collect();
        (
            median(
                &pairs
                    .iter()
                    .map(|(o, k)| k.secs / o.secs)
                    .collect::<Vec<_>>(),
            ),
            median(
                &pairs
                    .iter()
                    .map(|(o, k)| o.guest_cpu_s / k.guest_cpu_s)
                    .collect::<Vec<_>>(),
            ),
        )
    };
    let phases = PHASES
        .iter()
        .map(|p| {
            let of = |s: &str| -> Vec<&MetaRun> {
                runs.iter()
                    .filter(|r| r.server == s && r.phase == *p)
                    .collect()
            };
            let (ours_over_knfsd_speed, ours_over_knfsd_cpu) = ratios("knfsd", p);
            let vs_ganesha = with_ganesha.then(|| ratios("ganesha", p));
            PhaseSummary {
                phase: p.to_string(),
                what: phase_doc(p).into(),
                knfsd: server_summary(&of("knfsd")),
                ours: server_summary(&of("ours")),
                ours_over_knfsd_speed,
                ours_over_knfsd_cpu,
                ganesha: with_ganesha.then(|| server_summary(&of("ganesha"))),
                ours_over_ganesha_speed: vs_ganesha.map(|r| r.0),
                ours_over_ganesha_cpu: vs_ganesha.map(|r| r.1),
            }
        })
        .collect();
    let total = |s: &str, rep: u32| -> Option<f64> {
        PHASES
            .iter()
            .map(|p| find(s, rep, p).map(|r| r.secs))
            .sum::<Option<f64>>()
    };
    let speed_total = |other: &str| {
        median(
            &(0..reps)
                .filter_map(|rep| Some(total(other, rep)? / total("ours", rep)?))
                .collect::<Vec<_>>(),
        )
    };
    Metadata {
        files,
        phases,
        ours_over_knfsd_speed_total: speed_total("knfsd"),
        ours_over_ganesha_speed_total: with_ganesha.then(|| speed_total("ganesha")),
        runs,
        profiled_runs: Vec::new(),
    }
}

/// The metadata summary as text.
pub fn text(m: &Metadata) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Metadata: {} files per run; medians over repetitions; speed ratio = knfsd secs / ours secs (> 1: ours faster)",
        m.files
    );
    let _ = writeln!(
        o,
        "{:<7} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "phase",
        "knfsd s",
        "ours s",
        "speed",
        "knfsd f/s",
        "ours f/s",
        "cpu k s",
        "cpu o s",
        "cpu o/k"
    );
    for p in &m.phases {
        let _ = writeln!(
            o,
            "{:<7} {:>9.2} {:>9.2} {:>7.2}x {:>9.0} {:>9.0} {:>8.2} {:>8.2} {:>7.2}x",
            p.phase,
            p.knfsd.secs,
            p.ours.secs,
            p.ours_over_knfsd_speed,
            p.knfsd.files_per_s,
            p.ours.files_per_s,
            p.knfsd.guest_cpu_s,
            p.ours.guest_cpu_s,
            p.ours_over_knfsd_cpu,
        );
    }
    let _ = writeln!(
        o,
        "all five phases: ours/knfsd speed {:.2}x (goal >= 1.0x: {})",
        m.ours_over_knfsd_speed_total,
        if m.ours_over_knfsd_speed_total >= 1.0 {
            "MET"
        } else {
            "NOT MET"
        }
    );
    if let Some(total) = m.ours_over_ganesha_speed_total {
        let _ = writeln!(
            o,
            "{:<7} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8}",
            "phase",
            "ganesha s",
            "ours s",
            "speed",
            "gan. f/s",
            "ours f/s",
            "cpu g s",
            "cpu o s",
            "cpu o/g"
        );
        for p in &m.phases {
            if let (Some(g), Some(speed), Some(cpu)) = (
                &p.ganesha,
                p.ours_over_ganesha_speed,
                p.ours_over_ganesha_cpu,
            ) {
                let _ = writeln!(
                    o,
                    "{:<7} {:>9.2} {:>9.2} {:>7.2}x {:>9.0} {:>9.0} {:>8.2} {:>8.2} {:>7.2}x",
                    p.phase,
                    g.secs,
                    p.ours.secs,
                    speed,
                    g.files_per_s,
                    p.ours.files_per_s,
                    g.guest_cpu_s,
                    p.ours.guest_cpu_s,
                    cpu,
                );
            }
        }
        let _ = writeln!(o, "all five phases: ours/ganesha speed {total:.2}x");
    }
    let _ = writeln!(
        o,
        "NFS calls per phase (mountstats, median over repetitions), wall us per call, client's mean RTT per call (ms):"
    );
    for p in &m.phases {
        let _ = writeln!(o, "  {} ({})", p.phase, p.what);
        let servers = [
            ("knfsd", Some(&p.knfsd)),
            ("ours", Some(&p.ours)),
            ("ganesha", p.ganesha.as_ref()),
        ];
        for (name, s) in servers.into_iter().filter_map(|(n, s)| Some((n, s?))) {
            let ops: Vec<String> = s
                .ops
                .iter()
                .map(|(k, v)| {
                    let rtt = s.rtt_ms_per_call.get(k).copied().unwrap_or(f64::NAN);
                    // A median over an even count can be a half call.
                    let n = if v.fract() == 0.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.1}")
                    };
                    format!("{k} {n} ({rtt:.2} ms)")
                })
                .collect();
            let _ = writeln!(
                o,
                "    {name:<7} {:>6.0} calls, {:>7.0} us/call: {}",
                s.calls,
                s.us_per_call,
                ops.join(", ")
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opstats_parse_and_subtract() {
        let before = parse_opstats("GETATTR:3:1:2:0 FSINFO:2:0:0:0 ").unwrap();
        let after =
            parse_opstats("GETATTR:10:9:12:0 LOOKUP:100:250:300:100 FSINFO:2:0:0:0").unwrap();
        let d = op_delta(&before, &after);
        assert_eq!(d.len(), 2, "{d:?}: FSINFO had no calls in between");
        assert_eq!(
            d["GETATTR"],
            OpStat {
                ops: 7,
                rtt_ms: 8,
                execute_ms: 10,
                errors: 0
            }
        );
        assert_eq!(d["LOOKUP"].ops, 100);
        assert_eq!(d["LOOKUP"].errors, 100);
        assert!(parse_opstats("").unwrap().is_empty());
        assert!(parse_opstats("GETATTR:3:1:2").is_err());
        assert!(parse_opstats("GETATTR:3:x:2:0").is_err());
        assert!(parse_opstats(":3:1:2:0").is_err());
    }

    #[test]
    fn runs_summarise_to_speed_ratios() {
        let mut runs = Vec::new();
        for rep in 0..3 {
            for p in PHASES {
                // knfsd 2 s per phase, ours 1 s (rep 2: 4 s): ours faster in 2 of 3.
                let ours = if rep == 2 { "4.0 150" } else { "1.0 50" };
                runs.push(
                    MetaRun::from_records(
                        "knfsd",
                        rep,
                        p,
                        100,
                        "2.0 100",
                        "",
                        "LOOKUP:100:50:60:0",
                    )
                    .unwrap(),
                );
                runs.push(
                    MetaRun::from_records(
                        "ours",
                        rep,
                        p,
                        100,
                        ours,
                        "LOOKUP:5:1:1:0",
                        "LOOKUP:105:20:30:0 CREATE:100:30:40:0",
                    )
                    .unwrap(),
                );
            }
        }
        let m = summarise(100, 3, runs);
        let c = &m.phases[0];
        assert_eq!(c.phase, "create");
        assert_eq!(c.ours_over_knfsd_speed, 2.0);
        assert_eq!(c.ours_over_knfsd_cpu, 0.5);
        assert_eq!(c.knfsd.secs, 2.0);
        assert_eq!(c.ours.calls, 200.0);
        assert_eq!(c.ours.us_per_call, 5000.0);
        assert_eq!(c.ours.ops["CREATE"], 100.0);
        assert_eq!(c.knfsd.rtt_ms_per_call["LOOKUP"], 0.5);
        assert_eq!(c.ours.rtt_ms_per_call["LOOKUP"], 0.19);
        assert_eq!(m.ours_over_knfsd_speed_total, 2.0);
        assert!(text(&m).contains("speed 2.00x (goal >= 1.0x: MET)"));
        assert!(m.ours_over_ganesha_speed_total.is_none() && c.ganesha.is_none());
        assert!(!text(&m).contains("ganesha"));
        assert!(MetaRun::from_records("ours", 0, "stat", 1, "x", "", "").is_err());

        // ganesha 3 s per phase, 300 jiffies: ours/ganesha 3x (rep 2: 0.75x), CPU
        // 1/6 (rep 2: 0.5); ours/knfsd as without it.
        let mut runs = m.runs.clone();
        for rep in 0..3 {
            for p in PHASES {
                runs.push(
                    MetaRun::from_records("ganesha", rep, p, 100, "3.0 300", "", "GETATTR:7:7:7:0")
                        .unwrap(),
                );
            }
        }
        let g = summarise(100, 3, runs);
        let c = &g.phases[0];
        assert_eq!(c.ours_over_knfsd_speed, 2.0);
        assert_eq!(c.ours_over_ganesha_speed, Some(3.0));
        assert_eq!(c.ours_over_ganesha_cpu, Some(50.0 / 300.0));
        assert_eq!(c.ganesha.as_ref().unwrap().calls, 7.0);
        assert_eq!(g.ours_over_knfsd_speed_total, 2.0);
        assert_eq!(g.ours_over_ganesha_speed_total, Some(3.0));
        let t = text(&g);
        assert!(
            t.contains("all five phases: ours/ganesha speed 3.00x"),
            "{t}"
        );
        assert!(t.contains("    ganesha      7 calls"), "{t}");
    }
}

//! The report: every measurement, the machine, the configuration and the summary
//! (medians, interleaved ratios, goals), written as JSON and printed as tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::machine::Machine;
use crate::stats::{cpu_per_gib, mb_per_s, median, size_label};
use crate::workload::Sample;

/// One timed transfer (a sequential READ or WRITE run, or one `nfs-cat`).
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// `tcp` or `rdma` (our client), or the server name for peer runs.
    pub transport: String,
    /// READ or WRITE size in bytes (0: chosen by the client, e.g. `nfs-cat`).
    pub size: u32,
    /// Calls in flight (0: chosen by the client).
    pub depth: usize,
    /// Repetition index.
    pub rep: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// MB/s (10^6 bytes per second).
    pub mb_s: f64,
    /// Client CPU seconds (user + system).
    pub client_cpu_s: f64,
    /// Server CPU seconds (user + system).
    pub server_cpu_s: f64,
    /// Client CPU seconds per GiB moved.
    pub client_cpu_s_per_gib: f64,
    /// Server CPU seconds per GiB moved.
    pub server_cpu_s_per_gib: f64,
    /// Client + server CPU seconds per GiB moved.
    pub cpu_s_per_gib: f64,
}

impl Transfer {
    /// A record from a measured sample.
    pub fn new(transport: &str, size: u32, depth: usize, rep: u32, s: &Sample) -> Transfer {
        let c = s.m.client.total();
        let v = s.m.server.total();
        Transfer {
            transport: transport.to_string(),
            size,
            depth,
            rep,
            bytes: s.amount,
            secs: s.m.secs,
            mb_s: mb_per_s(s.amount, s.m.secs),
            client_cpu_s: c,
            server_cpu_s: v,
            client_cpu_s_per_gib: cpu_per_gib(c, s.amount),
            server_cpu_s_per_gib: cpu_per_gib(v, s.amount),
            cpu_s_per_gib: cpu_per_gib(c + v, s.amount),
        }
    }
}

/// One small-RPC rate run.
#[derive(Debug, Clone, Serialize)]
pub struct RpcRate {
    /// `tcp` or `rdma`.
    pub transport: String,
    /// `null` or `getattr`.
    pub proc: String,
    /// Calls in flight.
    pub inflight: usize,
    /// Repetition index.
    pub rep: u32,
    /// Calls completed.
    pub calls: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Client CPU seconds.
    pub client_cpu_s: f64,
    /// Server CPU seconds.
    pub server_cpu_s: f64,
    /// Client + server CPU microseconds per call.
    pub cpu_us_per_call: f64,
}

impl RpcRate {
    /// A record from a measured sample.
    pub fn new(transport: &str, proc: &str, inflight: usize, rep: u32, s: &Sample) -> RpcRate {
        let c = s.m.client.total();
        let v = s.m.server.total();
        RpcRate {
            transport: transport.to_string(),
            proc: proc.to_string(),
            inflight,
            rep,
            calls: s.amount,
            secs: s.m.secs,
            calls_per_s: if s.m.secs > 0.0 {
                s.amount as f64 / s.m.secs
            } else {
                0.0
            },
            client_cpu_s: c,
            server_cpu_s: v,
            cpu_us_per_call: if s.amount > 0 {
                (c + v) * 1e6 / s.amount as f64
            } else {
                f64::NAN
            },
        }
    }
}

/// Medians over repetitions of one (transport, size, depth) cell.
#[derive(Debug, Clone, Serialize)]
pub struct TransferMedian {
    /// As in [`Transfer`].
    pub transport: String,
    /// As in [`Transfer`].
    pub size: u32,
    /// As in [`Transfer`].
    pub depth: usize,
    /// Repetitions.
    pub n: usize,
    /// Median MB/s.
    pub mb_s: f64,
    /// Median client CPU s/GiB.
    pub client_cpu_s_per_gib: f64,
    /// Median server CPU s/GiB.
    pub server_cpu_s_per_gib: f64,
    /// Median total CPU s/GiB.
    pub cpu_s_per_gib: f64,
    /// Median CPU seconds per wall second (client + server; 2.0 = both cores busy).
    pub cpu_busy: f64,
}

/// A ratio `a / b` computed per repetition from runs interleaved in the same
/// session, and its median.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// Numerator label (e.g. `rdma`).
    pub a: String,
    /// Denominator label (e.g. `tcp`).
    pub b: String,
    /// Size (0: not applicable).
    pub size: u32,
    /// Depth (0: not applicable).
    pub depth: usize,
    /// Throughput ratio per repetition.
    pub throughput_ratios: Vec<f64>,
    /// Median throughput ratio.
    pub throughput: f64,
    /// Median ratio of total CPU s/GiB.
    pub cpu_per_gib: f64,
}

/// A goal from issue 8, reported against (never asserted).
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What is compared.
    pub name: String,
    /// The ratio aimed for.
    pub target: f64,
    /// The measured median ratio, if measured.
    pub measured: Option<f64>,
    /// `measured >= target`.
    pub met: Option<bool>,
    /// Why it was not measured, or a caveat.
    pub note: String,
}

/// Everything one run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `nfsbench` version.
    pub tool: String,
    /// The command line that produced this report.
    pub command: String,
    /// `git rev-parse HEAD` of the working directory the bench ran in (the code
    /// measured, when run from the checkout it was built from), plus `-dirty` if
    /// `git status --porcelain` lists changes.
    pub source_commit: Option<String>,
    /// Start time, UTC (RFC 3339).
    pub started_utc: String,
    /// End time, UTC.
    pub finished_utc: String,
    /// The machine and its load.
    pub machine: Machine,
    /// The plan that ran.
    pub config: serde_json::Value,
    /// Notes on what ran and what did not (RDMA availability, peers, ...).
    pub notes: Vec<String>,
    /// Sequential READ runs.
    pub reads: Vec<Transfer>,
    /// Sequential WRITE runs.
    pub writes: Vec<Transfer>,
    /// Small-RPC rate runs.
    pub rpc_rates: Vec<RpcRate>,
    /// Peer comparison runs (`nfs-cat`; transport = server name) and the one-stream
    /// TCP ceiling (transport `tcp-stream`).
    pub peers: Vec<Transfer>,
    /// Medians and ratios.
    pub summary: Summary,
}

/// Derived figures.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Summary {
    /// READ medians per cell.
    pub reads: Vec<TransferMedian>,
    /// WRITE medians per cell.
    pub writes: Vec<TransferMedian>,
    /// Peer medians per server.
    pub peers: Vec<TransferMedian>,
    /// RDMA/TCP READ ratios per cell.
    pub read_rdma_over_tcp: Vec<Ratio>,
    /// RDMA/TCP WRITE ratios per cell.
    pub write_rdma_over_tcp: Vec<Ratio>,
    /// ours/ganesha with `nfs-cat`.
    pub ours_over_ganesha: Option<Ratio>,
    /// Median calls/s per (transport, proc, inflight).
    pub rpc_rates: Vec<(String, String, usize, f64)>,
    /// Goals.
    pub goals: Vec<Goal>,
}

type Key = (String, u32, usize);

fn cells(v: &[Transfer]) -> BTreeMap<Key, Vec<&Transfer>> {
    let mut m: BTreeMap<Key, Vec<&Transfer>> = BTreeMap::new();
    for t in v {
        m.entry((t.transport.clone(), t.size, t.depth))
            .or_default()
            .push(t);
    }
    m
}

/// Medians of every (transport, size, depth) cell.
pub fn medians(v: &[Transfer]) -> Vec<TransferMedian> {
    cells(v)
        .into_iter()
        .map(|((transport, size, depth), ts)| {
            let med =
                |f: &dyn Fn(&Transfer) -> f64| median(&ts.iter().map(|t| f(t)).collect::<Vec<_>>());
            TransferMedian {
                transport,
                size,
                depth,
                n: ts.len(),
                mb_s: med(&|t| t.mb_s),
                client_cpu_s_per_gib: med(&|t| t.client_cpu_s_per_gib),
                server_cpu_s_per_gib: med(&|t| t.server_cpu_s_per_gib),
                cpu_s_per_gib: med(&|t| t.cpu_s_per_gib),
                cpu_busy: med(&|t| {
                    if t.secs > 0.0 {
                        (t.client_cpu_s + t.server_cpu_s) / t.secs
                    } else {
                        f64::NAN
                    }
                }),
            }
        })
        .collect()
}

/// The runs of `a` and `b` in one repetition of one cell.
type Pair<'a> = (Option<&'a Transfer>, Option<&'a Transfer>);

/// `a / b` per repetition for every (size, depth) cell where both ran.
pub fn ratios(v: &[Transfer], a: &str, b: &str) -> Vec<Ratio> {
    let mut by: BTreeMap<(u32, usize), BTreeMap<u32, Pair<'_>>> = BTreeMap::new();
    for t in v {
        let slot = by
            .entry((t.size, t.depth))
            .or_default()
            .entry(t.rep)
            .or_default();
        if t.transport == a {
            slot.0 = Some(t);
        } else if t.transport == b {
            slot.1 = Some(t);
        }
    }
    by.into_iter()
        .filter_map(|((size, depth), reps)| {
            let pairs: Vec<(&Transfer, &Transfer)> = reps
                .values()
                .filter_map(|(x, y)| Some(((*x)?, (*y)?)))
                .collect();
            if pairs.is_empty() {
                return None;
            }
            let tr: Vec<f64> = pairs.iter().map(|(x, y)| x.mb_s / y.mb_s).collect();
            let cr: Vec<f64> = pairs
                .iter()
                .map(|(x, y)| x.cpu_s_per_gib / y.cpu_s_per_gib)
                .collect();
            Some(Ratio {
                a: a.into(),
                b: b.into(),
                size,
                depth,
                throughput: median(&tr),
                throughput_ratios: tr,
                cpu_per_gib: median(&cr),
            })
        })
        .collect()
}

impl Summary {
    /// Computes the summary of a report's measurements.
    pub fn compute(
        reads: &[Transfer],
        writes: &[Transfer],
        rates: &[RpcRate],
        peers: &[Transfer],
    ) -> Summary {
        let mut rpc: BTreeMap<(String, String, usize), Vec<f64>> = BTreeMap::new();
        for r in rates {
            rpc.entry((r.transport.clone(), r.proc.clone(), r.inflight))
                .or_default()
                .push(r.calls_per_s);
        }
        let ours_over_ganesha = ratios(peers, "ours", "ganesha").into_iter().next();
        let read_rdma_over_tcp = ratios(reads, "rdma", "tcp");
        let mut s = Summary {
            reads: medians(reads),
            writes: medians(writes),
            peers: medians(peers),
            write_rdma_over_tcp: ratios(writes, "rdma", "tcp"),
            ours_over_ganesha: ours_over_ganesha.clone(),
            rpc_rates: rpc
                .into_iter()
                .map(|((t, p, i), v)| (t, p, i, median(&v)))
                .collect(),
            goals: Vec::new(),
            read_rdma_over_tcp: read_rdma_over_tcp.clone(),
        };
        s.goals.push(goal(
            "our NFSv3/TCP vs nfs-ganesha (nfs-cat, 1 GiB file, throughput)",
            1.3,
            ours_over_ganesha.map(|r| r.throughput),
            "not measured (peer comparison skipped)",
        ));
        // The 1 MiB cell with the most reads in flight.
        let best = read_rdma_over_tcp
            .iter()
            .filter(|r| r.size == 1 << 20)
            .max_by_key(|r| r.depth);
        s.goals.push(goal(
            &format!(
                "RDMA over iWARP vs our TCP, 1 MiB reads on loopback{}",
                best.map_or(String::new(), |r| format!(", {} in flight", r.depth))
            ),
            0.9,
            best.map(|r| r.throughput),
            "not measured (RDMA or the 1 MiB read size not in this run)",
        ));
        s.goals.push(goal(
            "ours vs knfsd in the qemu guest",
            1.0,
            None,
            "measured by `nfsbench lab` (lab.txt / lab.json beside this report), not by `run`",
        ));
        s
    }
}

fn goal(name: &str, target: f64, measured: Option<f64>, why_not: &str) -> Goal {
    Goal {
        name: name.into(),
        target,
        measured,
        met: measured.map(|m| m >= target),
        note: if measured.is_some() {
            String::new()
        } else {
            why_not.into()
        },
    }
}

/// The commit of the current directory's git checkout, if any.
pub fn source_commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// The tables printed at the end of a run (and saved as `report.txt`).
pub fn tables(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "nfsbench {}  ({} -> {})",
        r.tool, r.started_utc, r.finished_utc
    );
    let _ = writeln!(
        o,
        "machine: {} x {}, {} MiB, Linux {}; load {:.2} -> {:.2}",
        r.machine.cpus,
        r.machine.cpu_model,
        r.machine.mem_mib,
        r.machine.kernel,
        r.machine.loadavg_start[0],
        r.machine.loadavg_end[0]
    );
    let _ = writeln!(o, "command: {}", r.command);
    if let Some(c) = &r.source_commit {
        let _ = writeln!(o, "source: {c}");
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    let section = |o: &mut String, title: &str, ms: &[TransferMedian]| {
        if ms.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "\n{title} (medians; MB = 10^6 B; CPU s/GiB = client + server)"
        );
        let _ = writeln!(
            o,
            "{:<9} {:>8} {:>6} {:>4} {:>9} {:>11} {:>11} {:>10} {:>6}",
            "transport",
            "size",
            "depth",
            "n",
            "MB/s",
            "client s/GiB",
            "server s/GiB",
            "CPU s/GiB",
            "cores"
        );
        for m in ms {
            let _ = writeln!(
                o,
                "{:<9} {:>8} {:>6} {:>4} {:>9.1} {:>12.3} {:>12.3} {:>10.3} {:>6.2}",
                m.transport,
                if m.size == 0 {
                    "-".into()
                } else {
                    size_label(u64::from(m.size))
                },
                if m.depth == 0 {
                    "-".into()
                } else {
                    m.depth.to_string()
                },
                m.n,
                m.mb_s,
                m.client_cpu_s_per_gib,
                m.server_cpu_s_per_gib,
                m.cpu_s_per_gib,
                m.cpu_busy
            );
        }
    };
    section(&mut o, "Sequential READ", &r.summary.reads);
    ratio_table(
        &mut o,
        "READ RDMA/TCP (interleaved pairs)",
        &r.summary.read_rdma_over_tcp,
    );
    section(
        &mut o,
        "Sequential WRITE (UNSTABLE + COMMIT)",
        &r.summary.writes,
    );
    ratio_table(
        &mut o,
        "WRITE RDMA/TCP (interleaved pairs)",
        &r.summary.write_rdma_over_tcp,
    );
    if !r.summary.rpc_rates.is_empty() {
        let _ = writeln!(o, "\nSmall RPCs (median calls/s)");
        let _ = writeln!(
            o,
            "{:<9} {:<8} {:>8} {:>12}",
            "transport", "proc", "inflight", "calls/s"
        );
        for (t, p, i, v) in &r.summary.rpc_rates {
            let _ = writeln!(o, "{t:<9} {p:<8} {i:>8} {v:>12.0}");
        }
    }
    section(
        &mut o,
        "Peers: nfs-cat of the test file over NFSv3/TCP; tcp-stream = one loopback TCP stream (the ceiling)",
        &r.summary.peers,
    );
    if let Some(x) = &r.summary.ours_over_ganesha {
        ratio_table(
            &mut o,
            "ours/ganesha (interleaved pairs)",
            std::slice::from_ref(x),
        );
    }
    let _ = writeln!(o, "\nGoals (reported, not asserted)");
    for g in &r.summary.goals {
        match g.measured {
            Some(m) => {
                let _ = writeln!(
                    o,
                    "  {}: {:.2}x (target >= {:.1}x) {}",
                    g.name,
                    m,
                    g.target,
                    if m >= g.target { "MET" } else { "NOT MET" }
                );
            }
            None => {
                let _ = writeln!(o, "  {}: {} (target >= {:.1}x)", g.name, g.note, g.target);
            }
        }
    }
    o
}

fn ratio_table(o: &mut String, title: &str, rs: &[Ratio]) {
    if rs.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n{title}");
    let _ = writeln!(
        o,
        "{:>8} {:>6} {:>11} {:>14}  per-rep throughput ratios",
        "size", "depth", "throughput", "CPU per GiB"
    );
    for r in rs {
        let per: Vec<String> = r
            .throughput_ratios
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect();
        let _ = writeln!(
            o,
            "{:>8} {:>6} {:>10.2}x {:>13.2}x  {}",
            if r.size == 0 {
                "-".into()
            } else {
                size_label(u64::from(r.size))
            },
            if r.depth == 0 {
                "-".into()
            } else {
                r.depth.to_string()
            },
            r.throughput,
            r.cpu_per_gib,
            per.join(" ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuTimes, Measured};

    fn t(transport: &str, rep: u32, bytes: u64, secs: f64) -> Transfer {
        Transfer::new(
            transport,
            1 << 20,
            4,
            rep,
            &Sample {
                amount: bytes,
                m: Measured {
                    secs,
                    client: CpuTimes {
                        user: 0.5,
                        system: 0.5,
                    },
                    server: CpuTimes {
                        user: 0.0,
                        system: 1.0,
                    },
                },
            },
        )
    }

    #[test]
    fn ratios_pair_runs_of_the_same_repetition() {
        let v = vec![
            t("tcp", 0, 1_000_000, 1.0),
            t("rdma", 0, 2_000_000, 1.0),
            t("tcp", 1, 1_000_000, 1.0),
            t("rdma", 1, 3_000_000, 1.0),
            t("tcp", 2, 1_000_000, 1.0),
        ];
        let r = ratios(&v, "rdma", "tcp");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].throughput_ratios, vec![2.0, 3.0]);
        assert_eq!(r[0].throughput, 2.5);
        let m = medians(&v);
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].transport, "tcp");
        assert_eq!(m[1].n, 3);
        assert_eq!(m[1].cpu_busy, 2.0);
    }
}

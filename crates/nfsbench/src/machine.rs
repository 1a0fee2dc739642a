//! The machine description stored with every report: CPU model, cores, memory,
//! kernel, host name, and the load average before and after the run (the machine
//! is shared, so the load says how far to trust the numbers).

use serde::Serialize;

/// What the measurements ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: usize,
    /// MemTotal in MiB.
    pub mem_mib: u64,
    /// `uname -r`.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// 1/5/15-minute load averages when the run started.
    pub loadavg_start: [f64; 3],
    /// The same when it ended.
    pub loadavg_end: [f64; 3],
}

impl Machine {
    /// Describes this machine now (`loadavg_end` is filled by [`Machine::finish`]).
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".into(), |(_, v)| v.trim().to_string());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let uname = rustix::system::uname();
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_mib: mem_kib / 1024,
            kernel: uname.release().to_string_lossy().into_owned(),
            hostname: uname.nodename().to_string_lossy().into_owned(),
            loadavg_start: loadavg(),
            loadavg_end: [0.0; 3],
        }
    }

    /// Records the load average at the end of the run.
    pub fn finish(&mut self) {
        self.loadavg_end = loadavg();
    }
}

/// The three load averages from /proc/loadavg (zeros if unreadable).
pub fn loadavg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = s.split_whitespace().map(|x| x.parse().unwrap_or(0.0));
    [
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
    ]
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

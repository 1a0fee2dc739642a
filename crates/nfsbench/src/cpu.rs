//! CPU accounting: user + system seconds of this process (`getrusage(RUSAGE_SELF)`),
//! of waited-for children (`RUSAGE_CHILDREN`, for short-lived clients such as
//! `nfs-cat`) and of a running process by pid (`/proc/PID/stat` fields 14 and 15,
//! summed over all its threads, in clock ticks).
#![allow(unsafe_code)]

use std::time::Instant;

/// User and system CPU seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// User-mode seconds.
    pub user: f64,
    /// Kernel-mode seconds.
    pub system: f64,
}

impl CpuTimes {
    /// User + system.
    pub fn total(self) -> f64 {
        self.user + self.system
    }

    /// `self - earlier`, clamped at zero.
    pub fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: (self.user - earlier.user).max(0.0),
            system: (self.system - earlier.system).max(0.0),
        }
    }
}

fn rusage(who: libc::c_int) -> CpuTimes {
    // SAFETY: getrusage only writes into the struct we pass; a zeroed rusage is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return CpuTimes::default();
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    CpuTimes {
        user: secs(ru.ru_utime),
        system: secs(ru.ru_stime),
    }
}

/// This process, all threads.
pub fn self_cpu() -> CpuTimes {
    rusage(libc::RUSAGE_SELF)
}

/// All children waited for so far (terminated and reaped).
pub fn children_cpu() -> CpuTimes {
    rusage(libc::RUSAGE_CHILDREN)
}

/// A running process, all threads, from `/proc/PID/stat`; `None` if it is gone.
/// Resolution: one clock tick (10 ms at the usual 100 Hz).
pub fn pid_cpu(pid: u32) -> Option<CpuTimes> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat, clock_ticks())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime and stime (fields 14 and 15) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may contain spaces, so fields are counted after
/// the last `)`.
fn parse_stat(stat: &str, ticks: f64) -> Option<CpuTimes> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After ')': field 3 (state) is the first; utime is field 14, the 12th here.
    let utime: f64 = f.nth(11)?.parse().ok()?;
    let stime: f64 = f.next()?.parse().ok()?;
    Some(CpuTimes {
        user: utime / ticks,
        system: stime / ticks,
    })
}

/// CPU and wall clock of one measured interval, for the client (this process or
/// waited children) and a server process.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    start: Instant,
    client: CpuTimes,
    server: Option<CpuTimes>,
    server_pid: Option<u32>,
    children: bool,
}

/// What a [`Meter`] measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    /// Wall-clock seconds.
    pub secs: f64,
    /// Client CPU seconds.
    pub client: CpuTimes,
    /// Server CPU seconds (0 when the server's pid is unknown).
    pub server: CpuTimes,
}

impl Meter {
    /// Starts measuring. `children`: the client is the set of children waited for
    /// during the interval (an external client program), not this process.
    pub fn start(server_pid: Option<u32>, children: bool) -> Meter {
        Meter {
            client: if children { children_cpu() } else { self_cpu() },
            server: server_pid.and_then(pid_cpu),
            server_pid,
            children,
            start: Instant::now(),
        }
    }

    /// Stops measuring.
    pub fn stop(self) -> Measured {
        let secs = self.start.elapsed().as_secs_f64();
        let client_now = if self.children {
            children_cpu()
        } else {
            self_cpu()
        };
        let server = match (self.server, self.server_pid.and_then(pid_cpu)) {
            (Some(a), Some(b)) => b.since(a),
            _ => CpuTimes::default(),
        };
        Measured {
            secs,
            client: client_now.since(self.client),
            server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let line = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0 99 0 0";
        let t = parse_stat(line, 100.0).unwrap();
        assert_eq!(t.user, 2.5);
        assert_eq!(t.system, 0.5);
    }

    #[test]
    fn own_pid_is_readable() {
        assert!(pid_cpu(std::process::id()).is_some());
        assert!(self_cpu().total() >= 0.0);
    }
}

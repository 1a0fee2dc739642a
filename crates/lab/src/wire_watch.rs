//! The host's view of a [`crate::GuestPair`]'s wire when a guest stalls.
//!
//! Each pair scenario's guests run `lab_stall_watch` (lab/guest/lib.sh): the first
//! "not responding" or NETDEV WATCHDOG in a guest's kernel log makes it save its
//! RDMA, TCP and sunrpc state under `/share/stall-<name>/`. Stalls seen so far
//! (docs/stalls.md) left the wire between the two qemus dead in one direction, so
//! what decides between the candidate causes lives outside the guests: whether each
//! qemu still takes frames from the other (its virtio-net receive queue: the ring's
//! indexes in guest memory against the ones qemu last saw) and what waits in the
//! host's TCP connection that carries the wire. This watcher, run by the host for
//! the whole scenario, notices the first guest's stall directory, tells the other
//! guest to save its state too (`/share/stall-peer`: a server whose own kernel
//! logs nothing would otherwise save nothing), and records both qemus' wire
//! queues (QMP `x-query-virtio-queue-status` and `-element`, eth1 is the device
//! `wire`) and the host socket (`ss`) three times, 0, 10 and 30 s after, in
//! `wire-stall.txt` in both run directories; the failure report shows it.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The QOM path of eth1's virtio device (`-device virtio-net-pci,id=wire`).
const WIRE_DEVICE: &str = "/machine/peripheral/wire/virtio-backend";
/// virtio-net's receive and transmit queues of its first queue pair.
const QUEUES: [(u32, &str); 2] = [(0, "rx"), (1, "tx")];
/// When, after the stall is noticed, the host looks (the same indexes twice
/// mean nothing moved; 10 s is two of the guests' watcher periods).
const LOOKS: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_secs(10),
    Duration::from_secs(30),
];

/// One guest of the pair, as the watcher sees it.
#[derive(Debug, Clone)]
pub(crate) struct End {
    pub(crate) role: &'static str,
    pub(crate) out: PathBuf,
    pub(crate) share: PathBuf,
}

/// The running watcher; [`WireWatch::stop`] ends it.
pub(crate) struct WireWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl WireWatch {
    /// Watch `ends` (both guests of a pair whose wire is the host's TCP port
    /// `port`) until stopped.
    pub(crate) fn start(ends: Vec<End>, port: u16) -> WireWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || watch(&ends, port, &flag));
        WireWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop watching (a look under way finishes first).
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for WireWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn watch(ends: &[End], port: u16, stop: &AtomicBool) {
    let stalled = loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(e) = ends.iter().find(|e| stall_dir(e).is_some()) {
            break e.role;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    for e in ends {
        // The guest's lab_stall_watch polls for it; contents for a reader.
        let _ = fs::write(e.share.join("stall-peer"), format!("{stalled}\n"));
    }
    let noticed = Instant::now();
    let mut text = format!(
        "the {stalled} guest saved its stall state ({}); the host looked at the wire:\n",
        ends.iter()
            .find(|e| e.role == stalled)
            .and_then(stall_dir)
            .unwrap_or_default()
    );
    for at in LOOKS {
        while noticed.elapsed() < at {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = writeln!(text, "+{} s:", noticed.elapsed().as_secs());
        for e in ends {
            text += &look_at_queues(e);
        }
        text += &look_at_socket(port);
        for e in ends {
            let _ = fs::write(e.out.join("wire-stall.txt"), &text);
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
    }
}

/// `stall-<name>` in the guest's share, if its watcher made one.
fn stall_dir(e: &End) -> Option<String> {
    fs::read_dir(&e.share)
        .ok()?
        .flatten()
        .filter(|d| d.file_type().is_ok_and(|t| t.is_dir()))
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("stall-"))
}

/// One line per queue: qemu's indexes (`last-avail`: the next buffer it takes;
/// `shadow-avail`: the guest's avail index as qemu last read it; `used`), and the
/// ring's own in guest memory, read now.
fn look_at_queues(e: &End) -> String {
    let sock = e.out.join("qmp.sock");
    let mut commands = Vec::new();
    for (q, _) in QUEUES {
        commands.push(format!(
            "{{\"execute\":\"x-query-virtio-queue-status\",\
             \"arguments\":{{\"path\":\"{WIRE_DEVICE}\",\"queue\":{q}}}}}"
        ));
        commands.push(format!(
            "{{\"execute\":\"x-query-virtio-queue-element\",\
             \"arguments\":{{\"path\":\"{WIRE_DEVICE}\",\"queue\":{q}}}}}"
        ));
    }
    let answers = match crate::qmp::exchange(&sock, &commands) {
        Ok(a) => a,
        Err(err) => return format!("  {} eth1: no answer from qemu: {err}\n", e.role),
    };
    let mut s = String::new();
    for ((_, name), pair) in QUEUES.iter().zip(answers.chunks(2)) {
        let (status, element) = (&pair[0], &pair[1]);
        let n = |key: &str| number(status, key).map_or("?".into(), |v| v.to_string());
        let ring = |part: &str| {
            let at = element.find(&format!("\"{part}\": {{"));
            let idx = at.and_then(|i| number(&element[i..], "idx"));
            let flags = at.and_then(|i| number(&element[i..], "flags"));
            match (idx, flags) {
                (Some(i), Some(f)) => format!("{i} (flags {f})"),
                _ => "?".into(),
            }
        };
        let _ = writeln!(
            s,
            "  {} eth1 {name}: qemu last-avail {} shadow-avail {} used {} inuse {} \
             signalled-used {}; ring avail {} used {}",
            e.role,
            n("last-avail-idx"),
            n("shadow-avail-idx"),
            n("used-idx"),
            n("inuse"),
            n("signalled-used"),
            ring("avail"),
            ring("used"),
        );
        if status.contains("\"error\"") || element.contains("\"error\"") {
            let _ = writeln!(s, "    qemu said: {status} {element}");
        }
    }
    s
}

/// The host's TCP connection that carries the wire: what each qemu has not
/// read (Recv-Q) or could not send (Send-Q).
fn look_at_socket(port: u16) -> String {
    let filter = format!("( sport = :{port} or dport = :{port} )");
    match Command::new("ss")
        .args(["-tn", "state", "all", &filter])
        .output()
    {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| format!("  host ss: {}\n", l.trim()))
            .collect(),
        Err(e) => format!("  host ss: {e}\n"),
    }
}

/// The unsigned number after `"key": ` in a JSON text (qemu's answers are flat
/// enough for this).
fn number(json: &str, key: &str) -> Option<u64> {
    let pat = format!("\"{key}\": ");
    let at = json.find(&pat)? + pat.len();
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::number;

    #[test]
    fn numbers_are_read_from_qemus_answers() {
        let status = r#"{"return": {"signalled-used": 7, "inuse": 0, "last-avail-idx": 300, "used-idx": 299}}"#;
        assert_eq!(number(status, "last-avail-idx"), Some(300));
        assert_eq!(number(status, "used-idx"), Some(299));
        assert_eq!(number(status, "shadow-avail-idx"), None);
        let element = r#"{"return": {"avail": {"flags": 1, "idx": 812, "ring": 3}, "used": {"flags": 0, "idx": 556}}}"#;
        let used = element.find("\"used\": {").unwrap();
        assert_eq!(number(&element[used..], "idx"), Some(556));
        assert_eq!(number(element, "idx"), Some(812));
    }
}

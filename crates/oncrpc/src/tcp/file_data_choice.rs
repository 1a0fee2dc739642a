//! [`FileData::Auto`], the default: per connection, file ranges (NFS READ data) leave
//! by `sendfile` or by one copy, whichever delivered file bytes faster on this
//! connection when the two were last tried against each other.
//!
//! Why measure instead of picking one: neither way wins everywhere, and what decides
//! is the machine and the receiver, which the server cannot see (docs/bench/README.md,
//! "READ over TCP: sendfile or one copy" and "READ over TCP by sendfile on the host:
//! why it is bimodal"). On a host's loopback `sendfile` runs in one of two modes from
//! run to run (nfs-cat at about 1,400 or 2,800 MB/s: the receiver's wake-up lands in
//! the sender's `sendfile`), while one copy runs at about 2,700 every time; in the TCG
//! lab guest, where each copied byte is emulated, one copy delivered 0.64x of
//! `sendfile`. What the server can see is how fast its own replies leave.
//!
//! How: a *trial* is four rounds of at least [`ROUND_BYTES`] of file data each, sent
//! copy, `sendfile`, `sendfile`, copy (A B B A: a steady trend over the trial, such as
//! TCP's window or the client's read-ahead growing, weighs on both ways alike). Each
//! batch of replies with file data is timed from the end of the previous such batch
//! to its own end: while a client keeps reads in flight, that interval is what one
//! batch costs the connection, preparation included. An interval longer than
//! [`IDLE`] is the client pausing, not the server sending, and is left out with its
//! bytes. After the trial the faster way per byte serves the next [`SERVE_BYTES`]
//! (`sendfile` unless copying was at least [`MARGIN`] faster: it copies nothing,
//! which matters most across a real network), then a new trial starts, so a
//! connection follows a change of mode. Only [`FileData::Auto`] reads the clock.

use std::time::{Duration, Instant};

use super::FileData;

/// File bytes per round of a trial: four 1 MiB READs. Small enough that the slower
/// way costs little (a trial is 16 MiB of a stream); large enough that a round is
/// several replies.
pub(crate) const ROUND_BYTES: u64 = 4 << 20;

/// File bytes served the chosen way between two trials.
pub(crate) const SERVE_BYTES: u64 = 512 << 20;

/// An interval between two batches with file data longer than this is the client
/// idle, not the server busy: it does not count.
pub(crate) const IDLE: Duration = Duration::from_millis(100);

/// Copying is chosen only when it was at least this much faster per byte (a
/// fraction of `sendfile`'s time per byte).
pub(crate) const MARGIN: f64 = 0.05;

/// The way one batch of file ranges leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// `sendfile` from the page cache.
    Sendfile,
    /// `sendmsg` from a read-only mapping: the kernel copies once.
    Copy,
}

/// The order of a trial's rounds.
const TRIAL: [Method; 4] = [
    Method::Copy,
    Method::Sendfile,
    Method::Sendfile,
    Method::Copy,
];

/// One connection's way of sending file ranges: fixed, or chosen by trials.
#[derive(Debug)]
pub(crate) struct FileDataChoice {
    state: State,
    /// End of the previous batch with file data (only when measuring).
    last_end: Option<Instant>,
}

#[derive(Debug)]
enum State {
    Fixed(Method),
    Trial {
        /// Index into [`TRIAL`].
        round: usize,
        /// File bytes counted in this round so far (idle intervals excluded).
        round_bytes: u64,
        /// Per method (Sendfile, Copy): bytes and time counted.
        sums: [(u64, Duration); 2],
    },
    Serving {
        method: Method,
        /// File bytes still to send this way before the next trial.
        left: u64,
    },
}

fn slot(m: Method) -> usize {
    match m {
        Method::Sendfile => 0,
        Method::Copy => 1,
    }
}

impl FileDataChoice {
    pub(crate) fn new(file_data: FileData) -> Self {
        let state = match file_data {
            FileData::Sendfile => State::Fixed(Method::Sendfile),
            FileData::Copy => State::Fixed(Method::Copy),
            FileData::Auto => State::new_trial(),
        };
        FileDataChoice {
            state,
            last_end: None,
        }
    }

    /// The way the next batch's file ranges leave.
    pub(crate) fn method(&self) -> Method {
        match &self.state {
            State::Fixed(m) => *m,
            State::Trial { round, .. } => TRIAL[*round],
            State::Serving { method, .. } => *method,
        }
    }

    /// Whether [`Self::sent`] wants to be told (and so the clock read) after a batch.
    pub(crate) fn measures(&self) -> bool {
        !matches!(self.state, State::Fixed(_))
    }

    /// A batch carrying `file_bytes` of file ranges, sent the way [`Self::method`]
    /// said, ended at `now`.
    pub(crate) fn sent(&mut self, file_bytes: u64, now: Instant) {
        let interval = self.last_end.replace(now).map(|t| now.duration_since(t));
        match &mut self.state {
            State::Fixed(_) => {}
            State::Serving { method, left } => {
                *left = left.saturating_sub(file_bytes);
                if *left == 0 {
                    tracing::trace!(?method, "READ data over TCP: a new trial");
                    self.state = State::new_trial();
                }
            }
            State::Trial {
                round,
                round_bytes,
                sums,
            } => {
                // The first batch of a connection has no interval; an idle one does
                // not count.
                let Some(interval) = interval.filter(|d| *d <= IDLE) else {
                    return;
                };
                let sum = &mut sums[slot(TRIAL[*round])];
                sum.0 += file_bytes;
                sum.1 += interval;
                *round_bytes += file_bytes;
                if *round_bytes < ROUND_BYTES {
                    return;
                }
                *round += 1;
                *round_bytes = 0;
                if *round == TRIAL.len() {
                    let method = choose(sums);
                    tracing::debug!(
                        ?method,
                        sendfile_ns_per_kib = per_kib(sums[0]),
                        copy_ns_per_kib = per_kib(sums[1]),
                        "READ data over TCP: trial done"
                    );
                    self.state = State::Serving {
                        method,
                        left: SERVE_BYTES,
                    };
                }
            }
        }
    }
}

impl State {
    fn new_trial() -> Self {
        State::Trial {
            round: 0,
            round_bytes: 0,
            sums: [(0, Duration::ZERO); 2],
        }
    }
}

/// Nanoseconds per KiB of a (bytes, time) sum, for the log.
fn per_kib((bytes, time): (u64, Duration)) -> u64 {
    (time.as_nanos() as u64).saturating_mul(1024) / bytes.max(1)
}

/// The faster way per byte: copy only when at least [`MARGIN`] faster than sendfile.
fn choose(sums: &[(u64, Duration); 2]) -> Method {
    let per_byte = |(bytes, time): (u64, Duration)| time.as_secs_f64() / bytes.max(1) as f64;
    let (sendfile, copy) = (per_byte(sums[0]), per_byte(sums[1]));
    if copy < sendfile * (1.0 - MARGIN) {
        Method::Copy
    } else {
        Method::Sendfile
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Sends 1 MiB batches through a trial, each taking `cost(method)`, from `t`.
    fn run_trial(
        c: &mut FileDataChoice,
        t: &mut Instant,
        cost: impl Fn(Method) -> Duration,
    ) -> Vec<Method> {
        let mut seen = Vec::new();
        while matches!(c.state, State::Trial { .. }) {
            let m = c.method();
            seen.push(m);
            *t += cost(m);
            c.sent(MIB, *t);
        }
        seen
    }

    fn auto_after_first_batch(t: Instant) -> FileDataChoice {
        let mut c = FileDataChoice::new(FileData::Auto);
        // The connection's first batch only starts the clock.
        c.sent(MIB, t);
        c
    }

    #[test]
    fn fixed_ways_never_change_nor_measure() {
        for (fd, m) in [
            (FileData::Sendfile, Method::Sendfile),
            (FileData::Copy, Method::Copy),
        ] {
            let mut c = FileDataChoice::new(fd);
            assert!(!c.measures());
            let t = Instant::now();
            for i in 0..2000 {
                c.sent(MIB, t + Duration::from_millis(i));
                assert_eq!(c.method(), m);
            }
        }
    }

    #[test]
    fn a_trial_runs_copy_sendfile_sendfile_copy_by_rounds_of_bytes() {
        let mut t = Instant::now();
        let mut c = auto_after_first_batch(t);
        assert!(c.measures());
        let seen = run_trial(&mut c, &mut t, |_| Duration::from_millis(1));
        let per_round = (ROUND_BYTES / MIB) as usize;
        let mut want = Vec::new();
        for m in TRIAL {
            want.extend(std::iter::repeat(m).take(per_round));
        }
        assert_eq!(seen, want);
    }

    #[test]
    fn copy_is_chosen_when_it_delivers_faster_and_sendfile_otherwise() {
        for (copy_ms, sendfile_ms, want) in [
            (2, 3, Method::Copy),         // a third faster
            (3, 2, Method::Sendfile),     // slower
            (100, 102, Method::Sendfile), // within the margin: the copy-free way
        ] {
            let mut t = Instant::now();
            let mut c = auto_after_first_batch(t);
            run_trial(&mut c, &mut t, |m| match m {
                Method::Copy => Duration::from_micros(copy_ms * 10),
                Method::Sendfile => Duration::from_micros(sendfile_ms * 10),
            });
            assert_eq!(c.method(), want, "copy {copy_ms}, sendfile {sendfile_ms}");
        }
    }

    #[test]
    fn the_choice_serves_its_bytes_then_a_new_trial_starts() {
        let mut t = Instant::now();
        let mut c = auto_after_first_batch(t);
        let fast_copy = |m| match m {
            Method::Copy => Duration::from_millis(1),
            Method::Sendfile => Duration::from_millis(2),
        };
        run_trial(&mut c, &mut t, fast_copy);
        for _ in 0..SERVE_BYTES / MIB {
            assert_eq!(c.method(), Method::Copy);
            t += Duration::from_millis(1);
            c.sent(MIB, t);
        }
        assert!(matches!(c.state, State::Trial { round: 0, .. }));
        // The mode changed meanwhile: the next trial follows it.
        run_trial(&mut c, &mut t, |m| {
            fast_copy(m) * if m == Method::Copy { 3 } else { 1 }
        });
        assert_eq!(c.method(), Method::Sendfile);
    }

    #[test]
    fn idle_intervals_do_not_count() {
        let mut t = Instant::now();
        let mut c = auto_after_first_batch(t);
        // Copy is faster, but the client paused before each of its batches in the
        // first round: those intervals are left out, not charged to copying.
        let mut batches = 0;
        while matches!(c.state, State::Trial { .. }) {
            let m = c.method();
            t += match m {
                Method::Copy if batches < 8 => IDLE + Duration::from_millis(1),
                Method::Copy => Duration::from_millis(1),
                Method::Sendfile => Duration::from_millis(2),
            };
            c.sent(MIB, t);
            batches += 1;
        }
        assert_eq!(c.method(), Method::Copy);
    }
}

//! A thread that runs calls as their callers for a thread that must keep its own
//! identity (an RDMA device thread: `crate::rdma`, "Threads"), synchronously: the
//! device thread hands a call over and waits for its result.
//!
//! Why: handing a call to the main runtime's workers instead (a task spawned there,
//! its `JoinHandle` awaited) cost about 0.5 ms per call in the lab's guest: GETATTR's
//! round trip fell from 1.51 to 1.00 ms when it ran on the device thread itself
//! (docs/bench/README.md, goals table). That hand-off wakes two runtimes, each
//! through an eventfd or futex and several of tokio's clock reads (system calls where
//! the clock has no vDSO). Here a call costs one futex wake-up each way and a switch
//! between two threads of the process on one CPU: there is a delegate thread per CPU,
//! pinned to it, and a call goes to the one of the CPU its caller runs on, since the
//! caller only waits meanwhile. Measured in the lab's guest (docs/bench/README.md,
//! "NFS/RDMA metadata"): the hand-off's cost over GETATTR's path fell from 0.5 ms (a
//! task) to 0.36 ms (one delegate thread, wherever the scheduler woke it) to
//! 0.17-0.20 ms (one thread moved to its caller's CPU whenever that changed). Moving
//! it cost more where the caller changes CPU often: over rxe0 the hand-off was 0.55 ms
//! moved, 0.36 ms not; pinned threads never move.
//!
//! The cost: the device thread waits while the delegate works, so these calls of all
//! the device's connections run one at a time, as GETATTR's already do on the device
//! thread. They are the small metadata calls of [`crate::service::runs_inline`]; the
//! rest go to the blocking pool as before, and `--no-inline-metadata` sends every call
//! there. The threads are as many as the CPUs the process may use (at most
//! [`MAX_THREADS`]); idle, each is a sleeping thread and its stack.

use std::sync::mpsc;
use std::sync::Arc;

use rustix::thread::CpuSet;

type Job = Box<dyn FnOnce() + Send>;

/// Most delegate threads (CPUs beyond share the first thread).
pub const MAX_THREADS: usize = 256;

/// The delegate threads (module documentation). They end when this is dropped.
#[derive(Debug)]
pub struct Delegate {
    /// The thread pinned to each CPU, by CPU number.
    by_cpu: Vec<Option<mpsc::Sender<Job>>>,
    /// For a caller on a CPU without a thread of its own (beyond [`MAX_THREADS`], or
    /// outside the affinity the process had at start): the first thread.
    first: mpsc::Sender<Job>,
}

impl Delegate {
    /// Starts a delegate thread named `name` per CPU the calling thread may run on,
    /// each pinned to its CPU (unpinned if the kernel refuses; one unpinned thread if
    /// the CPUs cannot be read).
    pub fn start(name: &str) -> std::io::Result<Arc<Delegate>> {
        let cpus: Vec<Option<usize>> = match rustix::thread::sched_getaffinity(None) {
            Ok(set) => (0..CpuSet::MAX_CPU)
                .filter(|&cpu| set.is_set(cpu))
                .take(MAX_THREADS)
                .map(Some)
                .collect(),
            Err(_) => Vec::new(),
        };
        let cpus = if cpus.is_empty() { vec![None] } else { cpus };
        let mut by_cpu: Vec<Option<mpsc::Sender<Job>>> = Vec::new();
        let mut first = None;
        for cpu in cpus {
            let (jobs, queue) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let mut set = CpuSet::new();
                        set.set(cpu);
                        let _ = rustix::thread::sched_setaffinity(None, &set);
                    }
                    for job in queue {
                        // A panic fails that call (its result is never sent), not
                        // the thread.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })?;
            if let Some(cpu) = cpu {
                if by_cpu.len() <= cpu {
                    by_cpu.resize(cpu + 1, None);
                }
                by_cpu[cpu] = Some(jobs.clone());
            }
            first.get_or_insert(jobs);
        }
        let first = first.expect("at least one delegate thread");
        Ok(Arc::new(Delegate { by_cpu, first }))
    }

    /// Runs `work` on the delegate thread of the caller's CPU and waits for its
    /// result; `None` if it panicked (or the thread is gone).
    pub fn run<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = done.send(work());
        });
        let cpu = rustix::thread::sched_getcpu();
        let jobs = self
            .by_cpu
            .get(cpu)
            .and_then(Option::as_ref)
            .unwrap_or(&self.first);
        jobs.send(job).ok()?;
        result.recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the calling (test) thread to `cpu`.
    fn pin_to(cpu: usize) {
        let mut set = CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).unwrap();
    }

    #[test]
    fn runs_on_a_thread_of_its_own_and_survives_a_panic() {
        pin_to(rustix::thread::sched_getcpu());
        let d = Delegate::start("delegate-test").unwrap();
        let here = std::thread::current().id();
        let there = d.run(|| std::thread::current().id()).unwrap();
        assert_ne!(here, there);
        assert_eq!(
            d.run(|| std::thread::current().name().map(String::from))
                .unwrap()
                .as_deref(),
            Some("delegate-test")
        );
        assert_eq!(d.run(|| -> u32 { panic!("job failed") }), None);
        assert_eq!(d.run(|| std::thread::current().id()), Some(there));
    }

    /// Work runs on the CPU of the thread that handed it over, on a thread pinned
    /// there, whichever CPU that is.
    #[test]
    fn runs_on_the_cpu_of_the_waiting_thread() {
        let cpus: Vec<usize> = {
            let set = rustix::thread::sched_getaffinity(None).unwrap();
            (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
        };
        let d = Delegate::start("delegate-cpu").unwrap();
        for &cpu in &cpus {
            pin_to(cpu);
            let there = d.run(rustix::thread::sched_getcpu).unwrap();
            let allowed = d
                .run(|| rustix::thread::sched_getaffinity(None).unwrap())
                .unwrap();
            assert_eq!(there, cpu);
            assert!(allowed.count() == 1 && allowed.is_set(cpu), "cpu {cpu}");
        }
    }
}

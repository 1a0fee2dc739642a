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
//! between two threads of the process, on one CPU: the delegate follows the CPU of the
//! thread that hands it work ([`follow`]), since that thread only waits meanwhile.
//! Measured in the lab's guest (docs/bench/README.md, "NFS/RDMA metadata"): the
//! hand-off's cost over GETATTR's path fell from 0.5 ms (a task) to 0.36 ms (this
//! thread, wherever the scheduler woke it) to 0.17-0.20 ms (on the same CPU).
//!
//! The cost: the device thread waits while the delegate works, so these calls of all
//! the device's connections run one at a time, as GETATTR's already do on the device
//! thread. They are the small metadata calls of [`crate::service::runs_inline`]; the
//! rest go to the blocking pool as before, and `--no-inline-metadata` sends every call
//! there.

use std::sync::mpsc;
use std::sync::Arc;

type Job = (usize, Box<dyn FnOnce() + Send>);

/// The delegate thread (module documentation). It ends when this is dropped.
#[derive(Debug)]
pub struct Delegate {
    jobs: mpsc::Sender<Job>,
}

impl Delegate {
    /// Starts a delegate thread named `name`.
    pub fn start(name: &str) -> std::io::Result<Arc<Delegate>> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut on = None;
                for (cpu, job) in queue {
                    follow(&mut on, cpu);
                    // A panic fails that job alone: its result channel is dropped,
                    // which `run` reports as `None`.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })?;
        Ok(Arc::new(Delegate { jobs }))
    }

    /// Runs `work` on the delegate thread and waits for its result, blocking the
    /// calling thread. `None` if it panicked or the thread is gone.
    pub fn run<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = (
            rustix::thread::sched_getcpu(),
            Box::new(move || {
                let _ = done.send(work());
            }),
        );
        self.jobs.send(job).ok()?;
        result.recv().ok()
    }
}

/// Keeps the delegate thread on `cpu`, the one the waiting thread runs on: that thread
/// sleeps while the delegate works, so both wake-ups stay on one CPU, with no
/// inter-processor interrupt to wake a halted one (dear in the lab's emulated guest).
/// The delegate so takes the CPU the waiting thread leaves, and cannot move to another
/// meanwhile. `on` is where it was last kept. A CPU it may not use leaves it where it
/// is.
fn follow(on: &mut Option<usize>, cpu: usize) {
    if *on == Some(cpu) {
        return;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if rustix::thread::sched_setaffinity(None, &set).is_ok() {
        *on = Some(cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_its_own_thread_and_survives_a_panic() {
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

    /// The delegate runs on the CPU of the thread that handed it the work (retried:
    /// the test's thread may move between reading its CPU and handing the work over).
    #[test]
    fn follows_the_cpu_of_the_waiting_thread() {
        let d = Delegate::start("delegate-cpu").unwrap();
        let followed = (0..20).any(|_| {
            let here = rustix::thread::sched_getcpu();
            let there = d.run(rustix::thread::sched_getcpu).unwrap();
            let allowed = d
                .run(|| rustix::thread::sched_getaffinity(None).unwrap())
                .unwrap();
            here == there && allowed.count() == 1 && allowed.is_set(here)
        });
        assert!(followed, "the delegate never ran on the caller's CPU alone");
    }
}

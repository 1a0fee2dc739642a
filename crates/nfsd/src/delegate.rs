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
//! The hand-off itself is a queue under a mutex and `std::thread::park`/`unpark`
//! each way: no allocation besides the job and its result slot, and no spinning. A
//! waiting caller must not spin: the delegate it waits for runs on its own CPU, so
//! spinning only delays it (std's channels spin before they sleep, and the guest
//! profile showed their contended lock on the delegate's side).
//!
//! The cost: the device thread waits while the delegate works, so these calls of all
//! the device's connections run one at a time, as GETATTR's already do on the device
//! thread. They are the small metadata calls of [`crate::service::runs_inline`]; the
//! rest go to the blocking pool as before, and `--no-inline-metadata` sends every call
//! there. The threads are as many as the CPUs the process may use (at most
//! [`MAX_THREADS`]); idle, each is a sleeping thread and its stack.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;

use rustix::thread::CpuSet;

type Job = Box<dyn FnOnce() + Send>;

/// The jobs of one delegate thread.
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    /// Set when the [`Delegate`] goes: the thread ends once its queue is empty.
    closed: AtomicBool,
    /// The delegate thread, to unpark.
    thread: Thread,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("thread", &self.thread.name())
            .field("queued", &self.jobs().len())
            .finish()
    }
}

impl Queue {
    fn jobs(&self) -> MutexGuard<'_, VecDeque<Job>> {
        // A job runs outside the lock, so a poisoned lock (impossible: push and pop
        // do not panic) would still hold a consistent queue.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, job: Job) {
        self.jobs().push_back(job);
        self.thread.unpark();
    }

    /// The delegate thread's loop: each job in turn, sleeping when there is none.
    fn serve(&self) {
        loop {
            let job = self.jobs().pop_front();
            match job {
                // A panic fails that call (its result slot stays empty), not the
                // thread.
                Some(job) => {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
                None if self.closed.load(Ordering::Acquire) => return,
                // An unpark between the pop and here is kept: park returns at once.
                None => std::thread::park(),
            }
        }
    }
}

/// A call's result, and the caller waiting for it.
struct Slot<R> {
    value: Mutex<Option<R>>,
    finished: AtomicBool,
    caller: Thread,
}

/// Marks the call finished and wakes its caller when dropped: after the job stored
/// its result, or without one if the job panicked or was never run.
struct Finish<R>(Arc<Slot<R>>);

impl<R> Drop for Finish<R> {
    fn drop(&mut self) {
        self.0.finished.store(true, Ordering::Release);
        self.0.caller.unpark();
    }
}

/// Most delegate threads (CPUs beyond share the first thread).
pub const MAX_THREADS: usize = 256;

/// The delegate threads (module documentation). They end when this is dropped.
#[derive(Debug)]
pub struct Delegate {
    /// The thread pinned to each CPU, by CPU number.
    by_cpu: Vec<Option<Arc<Queue>>>,
    /// For a caller on a CPU without a thread of its own (beyond [`MAX_THREADS`], or
    /// outside the affinity the process had at start): the first thread.
    first: Arc<Queue>,
}

impl Drop for Delegate {
    fn drop(&mut self) {
        for queue in self.by_cpu.iter().flatten().chain([&self.first]) {
            queue.closed.store(true, Ordering::Release);
            queue.thread.unpark();
        }
    }
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
        let mut by_cpu: Vec<Option<Arc<Queue>>> = Vec::new();
        let mut first = None;
        for cpu in cpus {
            let (queue_tx, queue_rx) = std::sync::mpsc::sync_channel::<Arc<Queue>>(1);
            let thread = std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let mut set = CpuSet::new();
                        set.set(cpu);
                        let _ = rustix::thread::sched_setaffinity(None, &set);
                    }
                    if let Ok(queue) = queue_rx.recv() {
                        queue.serve();
                    }
                })?;
            let queue = Arc::new(Queue {
                jobs: Mutex::new(VecDeque::new()),
                closed: AtomicBool::new(false),
                thread: thread.thread().clone(),
            });
            let _ = queue_tx.send(queue.clone());
            if let Some(cpu) = cpu {
                if by_cpu.len() <= cpu {
                    by_cpu.resize(cpu + 1, None);
                }
                by_cpu[cpu] = Some(queue.clone());
            }
            first.get_or_insert(queue);
        }
        let first = first.expect("at least one delegate thread");
        Ok(Arc::new(Delegate { by_cpu, first }))
    }

    /// Runs `work` on the delegate thread of the caller's CPU and waits for its
    /// result; `None` if it panicked (or the thread is gone).
    pub fn run<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let slot = Arc::new(Slot {
            value: Mutex::new(None),
            finished: AtomicBool::new(false),
            caller: std::thread::current(),
        });
        let finish = Finish(slot.clone());
        let job: Job = Box::new(move || {
            let value = work();
            *finish.0.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
        });
        let cpu = rustix::thread::sched_getcpu();
        let queue = self
            .by_cpu
            .get(cpu)
            .and_then(Option::as_ref)
            .unwrap_or(&self.first);
        queue.push(job);
        // Spurious wake-ups (an unpark meant for an earlier wait) only loop.
        while !slot.finished.load(Ordering::Acquire) {
            std::thread::park();
        }
        let value = slot.value.lock().unwrap_or_else(|p| p.into_inner()).take();
        value
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

    /// Many callers at once each get their own result, and no wake-up is lost
    /// (a lost one would hang here).
    #[test]
    fn concurrent_callers_get_their_own_results() {
        let d = Delegate::start("delegate-many").unwrap();
        let callers: Vec<_> = (0..4u64)
            .map(|t| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u64 {
                        assert_eq!(d.run(move || t * 1_000_000 + i), Some(t * 1_000_000 + i));
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
    }

    /// The threads end when the delegate is dropped.
    #[test]
    fn threads_end_with_the_delegate() {
        let d = Delegate::start("delegate-end").unwrap();
        assert_eq!(d.run(|| 7), Some(7));
        let queues: Vec<_> = d.by_cpu.iter().flatten().map(Arc::downgrade).collect();
        drop(d);
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while queues.iter().any(|q| q.strong_count() > 0) {
            assert!(
                std::time::Instant::now() < give_up,
                "a delegate thread is still running"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
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

//! nfsd's periodic work, on a thread of its own.
//!
//! The server's periodic tasks (giving memory back: `malloc_trim`, idle call record
//! buffers, idle READ buffers; ageing the directory descriptor cache) each keep a
//! timer pending on the runtime they run on. A tokio worker that goes idle with a
//! timer pending reads the clock and waits for the network with a timeout, for which
//! `epoll_wait` arms a kernel timer and cancels it when a call wakes it, and reads the
//! clock again on waking; with no timer pending it waits with none. That is once per
//! call for a client that sends one call at a time, and in the lab's TCG guest each
//! clock read is a system call that reads the emulated HPET (the guest has no vDSO
//! clock). So these tasks run here, on a current-thread runtime of their own, and the
//! runtime that serves calls has no timer pending while it waits (measured in
//! docs/bench/README.md, "Periodic work off the serving runtime").

use std::io;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The housekeeping thread and its runtime, until dropped.
#[derive(Debug)]
pub struct Housekeeping {
    handle: Handle,
    /// Ends the thread (which then drops its runtime and the tasks on it).
    stop: Option<oneshot::Sender<()>>,
}

impl Housekeeping {
    /// Starts the thread `nfsd-housekeeping` with a current-thread runtime (timers
    /// only: the periodic tasks do no I/O).
    pub fn start() -> io::Result<Housekeeping> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("nfsd-housekeeping".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Housekeeping {
            handle,
            stop: Some(stop),
        })
    }

    /// Where to spawn periodic tasks.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for Housekeeping {
    /// Ends the thread without waiting for it (a drop inside an async task must not
    /// block); its tasks are dropped with its runtime.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Tasks run on the housekeeping thread, timers included, and are dropped with it.
    #[test]
    fn runs_timed_tasks_on_its_thread_and_drops_them_when_dropped() {
        let h = Housekeeping::start().unwrap();
        let (tx, rx) = mpsc::channel();
        h.handle().spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
        });
        let name = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(name.as_deref(), Some("nfsd-housekeeping"));
        // A task pending forever is dropped with the runtime when `h` is: so is the
        // sender it holds.
        let (held_tx, held_rx) = mpsc::channel::<()>();
        h.handle().spawn(async move {
            let _held = held_tx;
            std::future::pending::<()>().await;
        });
        drop(h);
        assert_eq!(
            held_rx.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }
}

//! A manager's helper threads: calls that must run at the same time as the caller's (a
//! `RedLock`'s attempt or release on this manager's master), without a thread started per
//! call.
//!
//! The set starts empty and grows by one thread whenever a call finds none idle, so it has
//! as many threads as the most calls ever in flight at once on this manager. They sleep on
//! one shared queue when idle. The manager owns them: dropping it ends the queue, and each
//! thread, done with what it runs, ends and is joined (`threads::join_stopping`). A call the
//! set cannot take (no thread could be started, or a child made by `fork()`, which has none
//! of the parent's threads) is handed back to the caller to run itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// One call to run on a helper thread. It drops the [`Ready`] it is given once its thread
/// may take another call, before it tells its caller it is done: a caller that posts again at
/// once then finds the thread idle rather than starting another.
pub(crate) type Job = Box<dyn FnOnce(Ready) + Send>;

/// Dropped by a call when its thread is free for the next one.
pub(crate) struct Ready(Option<Arc<AtomicUsize>>);

impl Ready {
    /// For a call the caller runs itself: no helper is freed.
    pub(crate) fn unused() -> Self {
        Ready(None)
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        if let Some(idle) = &self.0 {
            idle.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// A manager's helper threads (see the module docs).
pub(crate) struct Workers {
    /// The queue every thread takes its calls from; `None` once stopping.
    queue: Option<Sender<Job>>,
    jobs: Receiver<Job>,
    /// How many threads wait on the queue with nothing to do.
    idle: Arc<AtomicUsize>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The process the threads run in.
    pid: u32,
}

impl Workers {
    /// An empty set: no thread until the first call.
    pub(crate) fn new() -> Self {
        let (queue, jobs) = crossbeam_channel::unbounded();
        Workers {
            queue: Some(queue),
            jobs,
            idle: Arc::new(AtomicUsize::new(0)),
            threads: Mutex::new(Vec::new()),
            pid: std::process::id(),
        }
    }

    /// Runs `job` on an idle thread, or a new one; `Err(job)` when no thread can take it.
    pub(crate) fn run(&self, job: Job) -> Result<(), Job> {
        let Some(queue) = &self.queue else {
            return Err(job);
        };
        if std::process::id() != self.pid {
            return Err(job);
        }
        let took_idle = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |idle| {
                idle.checked_sub(1)
            })
            .is_ok();
        if !took_idle {
            if let Err(err) = self.start() {
                log::debug!("cannot start a helper thread ({err}); the caller runs the call");
                return Err(job);
            }
        }
        // Only `Drop` ends the receivers, and it takes `&mut self`.
        queue.send(job).map_err(|returned| returned.0)
    }

    /// Starts one more thread, busy with the call about to be queued.
    fn start(&self) -> std::io::Result<()> {
        let (jobs, idle) = (self.jobs.clone(), Arc::clone(&self.idle));
        let thread = thread::Builder::new()
            .name("redis-rlock-fan-out".into())
            .spawn(move || {
                // Ends when the manager drops the queue.
                while let Ok(job) = jobs.recv() {
                    job(Ready(Some(Arc::clone(&idle))));
                }
            })?;
        self.threads.lock().push(thread);
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        drop(self.queue.take());
        if std::process::id() != self.pid {
            return; // the parent's threads do not exist here
        }
        let here = thread::current().id();
        for thread in self.threads.get_mut().drain(..) {
            if thread.thread().id() != here {
                crate::threads::join_stopping(thread, "redis-rlock-fan-out");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn threads_are_reused_and_joined_at_drop() {
        let workers = Workers::new();
        let (done, finished) = crossbeam_channel::unbounded();
        for round in 0..20 {
            for _ in 0..3 {
                let done = done.clone();
                workers
                    .run(Box::new(move |ready| {
                        drop(ready);
                        done.send(round).unwrap();
                    }))
                    .unwrap_or_else(|_| panic!("taken"));
            }
            for _ in 0..3 {
                finished.recv_timeout(Duration::from_secs(10)).unwrap();
            }
        }
        // As many threads as calls at once.
        assert_eq!(workers.threads.lock().len(), 3);
        let (dropped, joined) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            drop(workers);
            dropped.send(()).unwrap();
        });
        joined
            .recv_timeout(Duration::from_secs(10))
            .expect("the drop joins its threads");
    }
}

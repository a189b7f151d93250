//! Running a few blocking calls at once: what [`RedLock`](crate::RedLock) tries and releases
//! its masters with.
//!
//! The calling thread runs the first call itself and each other one on a helper thread of the
//! manager of that call's master ([`crate::workers`]): the managers own those threads and
//! join them when dropped, so none outlives them. (Scoped threads started per round cost a
//! Redlock cycle on loopback about twice the time, and its p99 several times over.) Whose hold a call takes is not a matter of
//! the thread it runs on: an attempt names its owner
//! ([`Lock::acquire_for`](crate::kinds::lock::Lock::acquire_for)). A call no helper can take
//! (no thread could be started, or a forked child) is run by the caller, after the others are
//! on their way.

use std::panic::{self, AssertUnwindSafe};
use std::thread;

use crossbeam_channel::{Receiver, Sender};

use crate::workers::{Job, Ready, Workers};

/// One call to run, and the helper threads that may run it (those of its master's manager).
pub(crate) type Call<'a, R> = (&'a Workers, Box<dyn FnOnce() -> R + Send>);

/// A call's result, by its index.
type Report<R> = (usize, thread::Result<R>);

/// Runs `calls` at once and returns their results in the same order, once all have finished.
/// A call that panicked makes this call panic with its payload, after all the others have
/// finished.
pub(crate) fn run_all<R: Send + 'static>(calls: Vec<Call<'_, R>>) -> Vec<R> {
    let count = calls.len();
    let (done, finished) = crossbeam_channel::bounded(count);
    let mut here = Vec::new();
    for (index, (workers, call)) in calls.into_iter().enumerate() {
        let job = reporting(index, call, &done);
        if index == 0 {
            // The caller would only wait: it runs one call itself.
            here.push(job);
        } else if let Err(job) = workers.run(job) {
            here.push(job);
        }
    }
    // Only the calls hold senders now: one lost would disconnect rather than hang.
    drop(done);
    for job in here {
        job(Ready::unused());
    }
    gather(count, &finished)
}

/// `call` as a job that reports its result, by `index`, on `done`.
fn reporting<R: Send + 'static>(
    index: usize,
    call: Box<dyn FnOnce() -> R + Send>,
    done: &Sender<Report<R>>,
) -> Job {
    let done = done.clone();
    Box::new(move |ready| {
        let result = panic::catch_unwind(AssertUnwindSafe(call));
        drop(ready);
        let _ = done.send((index, result));
    })
}

/// The `count` results from `finished`, in their calls' order; the first panic goes on.
fn gather<R>(count: usize, finished: &Receiver<Report<R>>) -> Vec<R> {
    let mut slots: Vec<Option<thread::Result<R>>> = (0..count).map(|_| None).collect();
    for _ in 0..count {
        let (index, result) = finished.recv().expect("every call reports");
        slots[index] = Some(result);
    }
    let mut panicked = None;
    let mut results = Vec::with_capacity(count);
    for slot in slots {
        match slot.expect("every call reported") {
            Ok(result) => results.push(result),
            Err(payload) => {
                panicked.get_or_insert(payload);
            }
        }
    }
    if let Some(payload) = panicked {
        panic::resume_unwind(payload);
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn results_come_back_in_order_and_the_caller_runs_the_first() {
        let workers = Workers::new();
        let caller = thread::current().id();
        let calls: Vec<Call<'_, _>> = (0..5u64)
            .map(|i| -> Call<'_, _> {
                (
                    &workers,
                    Box::new(move || {
                        thread::sleep(Duration::from_micros(200 * (5 - i)));
                        (i, thread::current().id())
                    }),
                )
            })
            .collect();
        let results = run_all(calls);
        assert_eq!(
            results.iter().map(|r| r.0).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(results[0].1, caller);
        assert!(results[1..].iter().all(|r| r.1 != caller));
    }

    #[test]
    fn a_panicking_call_panics_the_caller_after_the_others_finished() {
        let workers = Workers::new();
        let finished = Arc::new(AtomicUsize::new(0));
        let calls: Vec<Call<'_, ()>> = (0..4)
            .map(|i| -> Call<'_, ()> {
                let finished = Arc::clone(&finished);
                (
                    &workers,
                    Box::new(move || {
                        if i == 2 {
                            panic!("call 2 fails");
                        }
                        thread::sleep(Duration::from_millis(20));
                        finished.fetch_add(1, Ordering::SeqCst);
                    }),
                )
            })
            .collect();
        let payload = panic::catch_unwind(AssertUnwindSafe(|| run_all(calls)))
            .expect_err("the panic goes on");
        assert_eq!(crate::threads::panic_message(&*payload), "call 2 fails");
        assert_eq!(finished.load(Ordering::SeqCst), 3);
        // The thread that ran it takes more.
        let again: Vec<Call<'_, i32>> = (0..3)
            .map(|i| -> Call<'_, i32> { (&workers, Box::new(move || i)) })
            .collect();
        assert_eq!(run_all(again), [0, 1, 2]);
    }
}

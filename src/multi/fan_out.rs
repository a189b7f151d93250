//! Running a few blocking calls at once: what [`RedLock`](crate::RedLock) tries and releases
//! its masters with.
//!
//! The calling thread runs the first call itself and each other one on a scoped thread of
//! its own, started for this call and joined before it returns: no thread outlives the call,
//! so none outlives a manager, and there is no pool to own or to shut down. Whose hold a call
//! takes is not a matter of the thread it runs on: an attempt names its owner
//! ([`Lock::acquire_for`](crate::kinds::lock::Lock::acquire_for)).

use std::io;
use std::panic;
use std::thread;

/// One call to run, borrowing what it needs from the caller.
pub(crate) type Call<'a, R> = Box<dyn FnOnce() -> R + Send + 'a>;

/// Runs `calls` at once and returns their results in the same order, once all have finished.
///
/// A call that no thread could be started for comes back as the error of the spawn (nothing
/// of it ran). A call that panicked makes this call panic with its payload, after all the
/// others have finished.
pub(crate) fn run_all<R: Send>(calls: Vec<Call<'_, R>>) -> Vec<io::Result<R>> {
    let mut calls = calls.into_iter();
    let Some(here) = calls.next() else {
        return Vec::new();
    };
    thread::scope(|scope| {
        let started: Vec<_> = calls
            .map(|call| {
                thread::Builder::new()
                    .name("redis-rlock-fan-out".into())
                    .spawn_scoped(scope, call)
            })
            .collect();
        // The caller would only wait: it runs one call itself.
        let mut results = vec![Ok(here())];
        let mut panicked = None;
        for thread in started {
            results.push(match thread {
                Ok(thread) => thread.join().map_err(|payload| {
                    panicked.get_or_insert(payload);
                    io::Error::other("the call panicked")
                }),
                Err(err) => Err(err),
            });
        }
        if let Some(payload) = panicked {
            panic::resume_unwind(payload);
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn results_come_back_in_order_and_the_caller_runs_the_first() {
        let caller = thread::current().id();
        let calls: Vec<Call<'_, _>> = (0..5u64)
            .map(|i| -> Call<'_, _> {
                Box::new(move || {
                    thread::sleep(std::time::Duration::from_micros(200 * (5 - i)));
                    (i, thread::current().id())
                })
            })
            .collect();
        let results: Vec<_> = run_all(calls).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            results.iter().map(|r| r.0).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(results[0].1, caller);
        assert!(results[1..].iter().all(|r| r.1 != caller));
    }

    #[test]
    fn a_panicking_call_panics_the_caller_after_the_others_finished() {
        let finished = AtomicUsize::new(0);
        let calls: Vec<Call<'_, ()>> = (0..4)
            .map(|i| -> Call<'_, ()> {
                let finished = &finished;
                Box::new(move || {
                    if i == 2 {
                        panic!("call 2 fails");
                    }
                    thread::sleep(std::time::Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let payload = panic::catch_unwind(panic::AssertUnwindSafe(|| run_all(calls)))
            .expect_err("the panic goes on");
        assert_eq!(crate::threads::panic_message(&*payload), "call 2 fails");
        assert_eq!(finished.load(Ordering::SeqCst), 3);
    }
}

//! Stopping a manager's background threads from a `Drop`.

use std::any::Any;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a drop waits for a stopping thread. Told to stop, the watchdog finishes at most one
/// renewal and the listener notices within one read tick (500 ms); only a connect in progress
/// (up to the connect timeout) takes longer, and a drop should not wait for that.
const JOIN_LIMIT: Duration = Duration::from_secs(1);

/// Joins `thread`, already told to stop, for up to [`JOIN_LIMIT`]; past that it is left to
/// finish by itself (it holds what it uses). A panic of the thread is logged, never raised:
/// this runs in `Drop`, maybe during unwinding, where a second panic aborts the process.
pub(crate) fn join_stopping(thread: JoinHandle<()>, what: &str) {
    // std has no join with a timeout: poll `is_finished`, briefly at first (a woken thread
    // usually ends within microseconds), then every 10 ms.
    let deadline = Instant::now() + JOIN_LIMIT;
    let mut pause = Duration::from_micros(50);
    while !thread.is_finished() {
        let now = Instant::now();
        if now >= deadline {
            log::warn!(
                "the {what} thread did not stop within {JOIN_LIMIT:?}; leaving it to end by itself"
            );
            return; // dropping the handle detaches the thread
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(10));
    }
    if let Err(payload) = thread.join() {
        log::error!("the {what} thread panicked: {}", panic_message(&*payload));
    }
}

/// The message of a panic payload (`panic!` makes a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::Mutex;

    /// Every log record of the unit tests (the only logger of this test binary).
    struct Recorder(Mutex<Vec<String>>);

    impl log::Log for Recorder {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, record: &log::Record) {
            self.0.lock().unwrap().push(format!("{}", record.args()));
        }
        fn flush(&self) {}
    }

    static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));

    /// Joins its thread when dropped, as the watchdog's and the listener's handles do.
    struct JoinsOnDrop(Option<JoinHandle<()>>);

    impl Drop for JoinsOnDrop {
        fn drop(&mut self) {
            if let Some(thread) = self.0.take() {
                join_stopping(thread, "test");
            }
        }
    }

    #[test]
    fn a_panicked_thread_is_logged_not_raised_even_during_unwinding() {
        log::set_logger(&RECORDER).expect("the only logger of the unit tests");
        log::set_max_level(log::LevelFilter::Trace);
        let thread = std::thread::spawn(|| panic!("renewal bug 42"));
        // The handle is dropped while the caller unwinds from a panic of its own: a second
        // panic there would abort the whole test binary.
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let _joins = JoinsOnDrop(Some(thread));
            panic!("the caller fails too");
        }));
        let payload = outcome.expect_err("the caller's panic goes on");
        assert_eq!(panic_message(&*payload), "the caller fails too");
        let logged = RECORDER.0.lock().unwrap().clone();
        assert!(
            logged
                .iter()
                .any(|line| line == "the test thread panicked: renewal bug 42"),
            "{logged:?}"
        );
    }
}

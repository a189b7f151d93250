//! Stopping a manager's background threads from a `Drop`.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a drop waits for a stopping thread. Told to stop, the watchdog finishes at most one
/// renewal and the listener notices within one read tick (500 ms); only a connect in progress
/// (up to the connect timeout) takes longer, and a drop should not wait for that.
const JOIN_LIMIT: Duration = Duration::from_secs(1);

/// Joins `thread`, already told to stop, for up to [`JOIN_LIMIT`]; past that it is left to
/// finish by itself (it holds what it uses).
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
    let _ = thread.join();
}

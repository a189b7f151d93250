//! How every call that can wait runs: without the GIL, cancellable by the user's token and,
//! on the main thread, by Ctrl-C.

use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use redis_rlock::{CancelToken, Result};

use crate::cancel::PyCancelToken;
use crate::errors;
use crate::signals::{on_main_thread, SignalWatcher};

/// How often [`detached`] looks for signals (Ctrl-C) while it waits.
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// Runs `call` with the GIL released until it returns, its `wait` (`None`: no limit) passes,
/// `cancel` is cancelled (`Cancelled`) or, on the main thread, a signal handler raises
/// (`KeyboardInterrupt`; the wait is cancelled first, so it leaves nothing in Redis).
///
/// `call` gets the wait left and the call's token, and returns `None` when that wait passed.
/// On the main thread a first attempt is made without waiting, so that an uncontended call
/// costs no watcher thread.
pub fn blocking<T: Send>(
    py: Python<'_>,
    wait: Option<Duration>,
    cancel: Option<&PyCancelToken>,
    call: impl Fn(Option<Duration>, &CancelToken) -> Result<Option<T>> + Sync,
) -> PyResult<Option<T>> {
    let deadline = wait.map(|w| Instant::now() + w);
    // A single attempt has nothing for a signal to interrupt.
    if wait == Some(Duration::ZERO) || !on_main_thread(py)? {
        return attempt(py, wait, cancel, &call);
    }
    if let Some(done) = attempt(py, Some(Duration::ZERO), cancel, &call)? {
        return Ok(Some(done));
    }
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let token = CancelToken::new();
        let _link = cancel.map(|c| c.link(&token));
        // Without a watcher (set_wakeup_fd refused, no thread to spare) the call still works;
        // only a signal waits for its end.
        let watcher = SignalWatcher::start(py, &token).ok();
        let result = py.detach(|| call(left, &token));
        let signalled = match watcher {
            Some(watcher) => watcher.stop(py)?,
            None => false,
        };
        // The handlers run now, on this thread: Ctrl-C raises KeyboardInterrupt here (and a
        // guard acquired meanwhile is dropped, which releases it).
        py.check_signals()?;
        match result {
            Err(err)
                if err.is_cancelled() && signalled && !cancel.is_some_and(|c| c.is_cancelled()) =>
            {
                // A handler that did not raise: wait again, for what is left.
                continue;
            }
            other => return other.map_err(|e| errors::to_py(py, e)),
        }
    }
}

/// One call with the GIL released, cancellable by `cancel` only.
fn attempt<T: Send>(
    py: Python<'_>,
    wait: Option<Duration>,
    cancel: Option<&PyCancelToken>,
    call: &(impl Fn(Option<Duration>, &CancelToken) -> Result<Option<T>> + Sync),
) -> PyResult<Option<T>> {
    let token = CancelToken::new();
    let _link = cancel.map(|c| c.link(&token));
    py.detach(|| call(wait, &token))
        .map_err(|e| errors::to_py(py, e))
}

/// A call that cannot be given a token (building a manager), with the GIL released. On the
/// main thread it runs on a thread of its own, so that a signal handler can run meanwhile: if
/// one raises (Ctrl-C), its exception is raised at once and the call's result, when it
/// comes, is dropped.
pub fn detached<T: Send + 'static>(
    py: Python<'_>,
    call: impl FnOnce() -> Result<T> + Send + 'static,
) -> PyResult<T> {
    if !on_main_thread(py)? {
        return quick(py, call);
    }
    let (send, receive) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("redis-rlock-call".into())
        .spawn(move || {
            let _ = send.send(call());
        })?;
    loop {
        match py.detach(|| receive.recv_timeout(SIGNAL_SLICE)) {
            Ok(result) => return result.map_err(|e| errors::to_py(py, e)),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "the call's thread ended without a result",
                ))
            }
        }
    }
}

/// A call that does not wait (a round trip or two), with the GIL released.
pub fn quick<T: Send>(py: Python<'_>, call: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    py.detach(call).map_err(|e| errors::to_py(py, e))
}

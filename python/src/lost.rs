//! `Guard.lost_event`: a `threading.Event`-like view of a guard's lost signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use pyo3::prelude::*;

use crate::cancel::PyCancelToken;
use crate::duration;
use crate::errors;
use crate::repr;

/// How long a wait sleeps before it looks for signals (Ctrl-C) again.
const SLICE: Duration = Duration::from_millis(50);

/// Set when the guard's lock is found lost; never set if the guard is released first.
#[pyclass(module = "redis_rlock", frozen)]
pub struct LostEvent {
    signal: Receiver<()>,
    set: AtomicBool,
}

impl LostEvent {
    pub fn new(signal: Receiver<()>) -> Self {
        LostEvent {
            signal,
            set: AtomicBool::new(false),
        }
    }

    /// Waits up to `slice` for the signal; whether it came (now or before).
    fn poll(&self, slice: Duration) -> bool {
        if self.set.load(Ordering::SeqCst) {
            return true;
        }
        let got = match slice.is_zero() {
            true => self.signal.try_recv().is_ok(),
            false => match self.signal.recv_timeout(slice) {
                Ok(()) => true,
                // Released: it will never be set; sleep the slice as Event.wait would.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(slice);
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
            },
        };
        if got {
            self.set.store(true, Ordering::SeqCst);
        }
        got
    }
}

#[pymethods]
impl LostEvent {
    /// Whether the lock was found lost.
    fn is_set(&self) -> bool {
        self.poll(Duration::ZERO)
    }

    /// Waits until the lock is found lost or `timeout` seconds pass (`None`: no limit);
    /// returns `is_set()`. Releases the GIL; `cancel` (`Cancelled`) and Ctrl-C interrupt it
    /// within a slice.
    #[pyo3(signature = (timeout=None, cancel=None))]
    fn wait(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<bool> {
        let deadline = duration::opt_from_py(timeout, "timeout")?.map(|t| Instant::now() + t);
        loop {
            if cancel.is_some_and(PyCancelToken::is_cancelled) {
                return Err(errors::new(
                    py,
                    "Cancelled",
                    "the wait for the lock's loss was cancelled".into(),
                ));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let slice = left.map_or(SLICE, |l| l.min(SLICE));
            if py.detach(|| self.poll(slice)) {
                return Ok(true);
            }
            py.check_signals()?;
            if left.is_some_and(|l| l <= SLICE) {
                return Ok(self.is_set());
            }
        }
    }

    fn __repr__(&self) -> String {
        format!("LostEvent(set={})", repr::flag(self.is_set()))
    }
}

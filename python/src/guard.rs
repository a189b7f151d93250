//! `redis_rlock.Guard`: one hold of a lock, released by `unlock()` or on leaving `with`.

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyAny;
use redis_rlock::LockGuard;

use crate::duration;
use crate::errors;
use crate::lost::LostEvent;
use crate::repr;
use crate::wait::quick;

/// One hold of a lock. A context manager: leaving the `with` block releases it, also after an
/// exception. Dropped unreleased, it is released then (errors are only logged).
#[pyclass(name = "Guard", module = "redis_rlock", frozen)]
pub struct Guard {
    name: String,
    fencing_token: Option<u64>,
    lease: Option<f64>,
    guard: Mutex<Option<LockGuard>>,
    lost_event: Mutex<Option<Py<LostEvent>>>,
}

impl Guard {
    pub fn new(guard: LockGuard) -> Self {
        Guard {
            name: guard.name().to_owned(),
            fencing_token: guard.fencing_token(),
            lease: guard.lease().map(duration::to_py),
            guard: Mutex::new(Some(guard)),
            lost_event: Mutex::new(None),
        }
    }

    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(guard) = self.guard.lock().take() else {
            return Err(errors::new(
                py,
                "NotHeld",
                format!("the guard of lock {:?} was already released", self.name),
            ));
        };
        quick(py, move || guard.unlock())
    }
}

#[pymethods]
impl Guard {
    /// Releases this hold. Raises `NotHeld` if it was gone (expired, force-unlocked) or was
    /// already released.
    fn unlock(&self, py: Python<'_>) -> PyResult<()> {
        self.release(py)
    }

    /// Whether the lock is known lost (the watchdog found it gone, or the confirmed lease ran
    /// out). No I/O. `False` once released.
    fn is_lost(&self) -> bool {
        self.guard.lock().as_ref().is_some_and(LockGuard::is_lost)
    }

    /// Whether this guard still holds (was not released through it).
    fn is_held(&self) -> bool {
        self.guard.lock().is_some()
    }

    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token (an `int`) for fenced acquires, else `None`.
    #[getter]
    fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The fixed lease in seconds; `None` when the watchdog renews the lock.
    #[getter]
    fn lease(&self) -> Option<f64> {
        self.lease
    }

    /// A `threading.Event`-like object (`is_set()`, `wait(timeout=None)`) set when the lock
    /// is found lost. The same object on every access.
    #[getter]
    fn lost_event(&self, py: Python<'_>) -> PyResult<Py<LostEvent>> {
        let mut cached = self.lost_event.lock();
        if let Some(event) = cached.as_ref() {
            return Ok(event.clone_ref(py));
        }
        let signal = match self.guard.lock().as_ref() {
            Some(guard) => guard.lost_signal(),
            None => crossbeam_channel::never(),
        };
        let event = Py::new(py, LostEvent::new(signal))?;
        *cached = Some(event.clone_ref(py));
        Ok(event)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases unless already released. Never suppresses the body's exception; but if the
    /// release fails (`NotHeld`: the hold was gone), that error is raised instead, with the
    /// body's exception as its `__context__`.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.guard.lock().is_some() {
            self.release(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Guard(name={}, held={}, fencing_token={})",
            repr::string(py, &self.name),
            repr::flag(self.guard.lock().is_some()),
            repr::number(self.fencing_token)
        )
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.get_mut().take() {
            // The release is a round trip: let other threads run meanwhile.
            Python::attach(|py| py.detach(move || drop(guard)));
        }
    }
}

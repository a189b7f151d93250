//! `redis_rlock.Lock`: any kind of lock (plain, fair, spin, string, read, write), both a Redisson lock
//! and a `threading.RLock` stand-in; and `redis_rlock.ReadWriteLock`.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyAny;
use redis_rlock::{AcquireOptions, DistributedLock, Lease, LockGuard, ReadWriteLock};

use crate::cancel::PyCancelToken;
use crate::duration;
use crate::errors;
use crate::guard::Guard;
use crate::held::Holds;
use crate::repr;
use crate::wait::{blocking, quick};

/// Acquires `lock` as Redisson's overloads do: `wait` `None` waits as long as it takes.
pub fn acquire(
    py: Python<'_>,
    lock: &dyn DistributedLock,
    wait: Option<Duration>,
    lease: Lease,
    fenced: bool,
    cancel: Option<&PyCancelToken>,
) -> PyResult<Option<LockGuard>> {
    blocking(py, wait, cancel, |left, token| {
        let mut options = AcquireOptions::new()
            .lease(lease)
            .fenced(fenced)
            .cancel_token(token);
        if let Some(left) = left {
            options = options.wait(left);
        }
        lock.acquire(options)
    })
}

/// A lock of one name and kind. Every Redisson call (`lock`, `try_lock`, ..., each returning
/// a `Guard`), and `acquire()`/`release()`/`with lock:` as on a `threading.RLock`.
#[pyclass(name = "Lock", module = "redis_rlock", frozen)]
pub struct PyLock {
    lock: Arc<dyn DistributedLock>,
    kind: &'static str,
    holds: Holds,
}

impl PyLock {
    pub fn new(lock: Arc<dyn DistributedLock>, kind: &'static str, holds: Holds) -> Self {
        PyLock { lock, kind, holds }
    }

    /// The key of this lock's holds in [`Holds`]: kind and name.
    fn holds_key(&self) -> String {
        format!("{}:{}", self.kind, self.lock.name())
    }

    fn guard(
        &self,
        py: Python<'_>,
        wait: Option<Duration>,
        lease: Lease,
        fenced: bool,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        let guard = acquire(py, self.lock.as_ref(), wait, lease, fenced, cancel)?;
        Ok(guard.map(Guard::new))
    }
}

/// A fixed lease from Python.
pub fn fixed(lease: &Bound<'_, PyAny>) -> PyResult<Lease> {
    Ok(Lease::Fixed(duration::from_py(lease, "lease")?))
}

/// A wait that must be given, from Python.
pub fn wait_of(wait: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
    duration::from_py(wait, "wait").map(Some)
}

/// A guard that waits without limit always comes.
pub fn acquired(guard: Option<Guard>) -> Guard {
    guard.expect("a wait without limit returns a guard or an error")
}

#[pymethods]
impl PyLock {
    /// The lock's name, which is also its Redis key.
    #[getter]
    fn name(&self) -> &str {
        self.lock.name()
    }

    /// `"lock"`, `"fair"`, `"spin"`, `"string"`, `"read"` or `"write"`.
    #[getter]
    fn kind(&self) -> &str {
        self.kind
    }

    /// Waits as long as it takes; the watchdog renews the lock while the guard holds it.
    #[pyo3(signature = (cancel=None))]
    fn lock(&self, py: Python<'_>, cancel: Option<&PyCancelToken>) -> PyResult<Guard> {
        self.guard(py, None, Lease::Watchdog, false, cancel)
            .map(acquired)
    }

    /// Waits up to `wait` seconds; `None` when it passed.
    #[pyo3(signature = (wait, cancel=None))]
    fn try_lock(
        &self,
        py: Python<'_>,
        wait: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        self.guard(py, wait_of(wait)?, Lease::Watchdog, false, cancel)
    }

    /// Waits as long as it takes; the lock expires `lease` seconds after it was taken.
    #[pyo3(signature = (lease, cancel=None))]
    fn lock_with_lease(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Guard> {
        self.guard(py, None, fixed(lease)?, false, cancel)
            .map(acquired)
    }

    /// Waits up to `wait` seconds, with a fixed `lease`; `None` when the wait passed.
    #[pyo3(signature = (wait, lease, cancel=None))]
    fn try_lock_with_lease(
        &self,
        py: Python<'_>,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        self.guard(py, wait_of(wait)?, fixed(lease)?, false, cancel)
    }

    /// Like `lock()`, and the guard carries a fencing token.
    #[pyo3(signature = (cancel=None))]
    fn lock_fenced(&self, py: Python<'_>, cancel: Option<&PyCancelToken>) -> PyResult<Guard> {
        self.guard(py, None, Lease::Watchdog, true, cancel)
            .map(acquired)
    }

    /// Like `try_lock()`, and the guard carries a fencing token.
    #[pyo3(signature = (wait, cancel=None))]
    fn try_lock_fenced(
        &self,
        py: Python<'_>,
        wait: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        self.guard(py, wait_of(wait)?, Lease::Watchdog, true, cancel)
    }

    /// Whether anyone holds the lock.
    fn is_locked(&self, py: Python<'_>) -> PyResult<bool> {
        quick(py, || self.lock.is_locked())
    }

    /// Whether the calling thread holds it through this manager.
    fn is_held_by_current_thread(&self, py: Python<'_>) -> PyResult<bool> {
        quick(py, || self.lock.is_held_by_current_thread())
    }

    /// How many holds the calling thread has (0 when none).
    fn hold_count(&self, py: Python<'_>) -> PyResult<u32> {
        quick(py, || self.lock.hold_count())
    }

    /// The remaining lease in seconds as Redis sees it; `None` when nobody holds the lock.
    fn remaining_ttl(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        quick(py, || self.lock.remaining_ttl()).map(|ttl| ttl.map(duration::to_py))
    }

    /// Deletes the lock whoever holds it and wakes its waiters; `False` when it was free.
    fn force_unlock(&self, py: Python<'_>) -> PyResult<bool> {
        quick(py, || self.lock.force_unlock())
    }

    /// `threading.RLock.acquire`: waits (`blocking`) up to `timeout` seconds (-1: no limit);
    /// whether it acquired. Reentrant; each acquire needs one `release()`.
    #[pyo3(
        signature = (blocking=Truthy(true), timeout=None, cancel=None),
        text_signature = "(self, blocking=True, timeout=-1, cancel=None)"
    )]
    fn acquire(
        &self,
        py: Python<'_>,
        blocking: Truthy,
        timeout: Option<&Bound<'_, PyAny>>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<bool> {
        let wait = rlock_wait(blocking.0, timeout)?;
        let guard = acquire(py, self.lock.as_ref(), wait, Lease::Watchdog, false, cancel)?;
        Ok(match guard {
            Some(guard) => {
                self.holds.push(&self.holds_key(), guard);
                true
            }
            None => false,
        })
    }

    /// `threading.RLock.release`: releases the calling thread's latest `acquire()`;
    /// `RuntimeError` when it has none.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let guard = self
            .holds
            .pop(&self.holds_key())
            .ok_or_else(errors::unacquired)?;
        quick(py, move || guard.unlock())
    }

    /// Whether the calling thread holds it through `acquire()` (for `threading.Condition`).
    fn _is_owned(&self) -> bool {
        self.holds.count(&self.holds_key()) > 0
    }

    /// `threading.Condition.wait`'s first step, as on a `threading.RLock`: releases every
    /// hold the calling thread took through `acquire()`; their number, for `_acquire_restore`.
    fn _release_save(&self, py: Python<'_>) -> PyResult<usize> {
        let guards = self.holds.take(&self.holds_key());
        if guards.is_empty() {
            return Err(errors::unacquired());
        }
        let count = guards.len();
        // Latest first, as that many `release()` calls would.
        quick(py, move || {
            guards.into_iter().rev().try_for_each(LockGuard::unlock)
        })?;
        Ok(count)
    }

    /// `threading.Condition.wait`'s last step: acquires again as many holds as
    /// `_release_save` released (the first waits as long as it takes).
    fn _acquire_restore(&self, py: Python<'_>, count: usize) -> PyResult<()> {
        for _ in 0..count {
            self.acquire(py, Truthy(true), None, None)?;
        }
        Ok(())
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        self.acquire(py, Truthy(true), None, None)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Lock(name={}, kind={})",
            repr::string(py, self.lock.name()),
            repr::string(py, self.kind)
        )
    }
}

/// `threading.RLock.acquire`'s `blocking`: any object, taken for its truth value.
pub struct Truthy(pub bool);

impl<'a, 'py> FromPyObject<'a, 'py> for Truthy {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        value.is_truthy().map(Truthy)
    }
}

/// `threading.Lock.acquire`'s arguments as a wait: `None` is no limit.
fn rlock_wait(blocking: bool, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    let no_limit = match timeout {
        None => true,
        Some(t) => t.extract::<f64>().is_ok_and(|t| t == -1.0),
    };
    match (blocking, no_limit) {
        (false, true) => Ok(Some(Duration::ZERO)),
        (false, false) => Err(PyValueError::new_err(
            "can't specify a timeout for a non-blocking call",
        )),
        (true, true) => Ok(None),
        (true, false) => duration::opt_from_py(timeout, "timeout"),
    }
}

/// A read-write lock: `read_lock()` (shared) and `write_lock()` (exclusive) on one name.
#[pyclass(name = "ReadWriteLock", module = "redis_rlock", frozen)]
pub struct PyReadWriteLock {
    lock: ReadWriteLock,
    holds: Holds,
}

impl PyReadWriteLock {
    pub fn new(lock: ReadWriteLock, holds: Holds) -> Self {
        PyReadWriteLock { lock, holds }
    }
}

#[pymethods]
impl PyReadWriteLock {
    /// The name, which is also its Redis key.
    #[getter]
    fn name(&self) -> &str {
        self.lock.name()
    }

    /// The shared half: any number of readers hold it at once.
    fn read_lock(&self) -> PyLock {
        PyLock::new(Arc::new(self.lock.read_lock()), "read", self.holds.clone())
    }

    /// The exclusive half.
    fn write_lock(&self) -> PyLock {
        PyLock::new(
            Arc::new(self.lock.write_lock()),
            "write",
            self.holds.clone(),
        )
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("ReadWriteLock(name={})", repr::string(py, self.lock.name()))
    }
}

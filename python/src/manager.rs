//! `redis_rlock.LockManager`: connections, the watchdog and the pub/sub listener, shared by
//! every lock taken through it.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict};
use redis_rlock::{Lease, LockManager, LockManagerBuilder};

use crate::cancel::PyCancelToken;
use crate::duration;
use crate::guard::Guard;
use crate::held::Holds;
use crate::latch::PyCountDownLatch;
use crate::lock::{acquire, acquired, fixed, wait_of, PyLock, PyReadWriteLock};
use crate::repr;
use crate::semaphore::{PyPermitExpirableSemaphore, PySemaphore};
use crate::settings;
use crate::wait::detached;

/// A connection to one Redis deployment. Create one per process (after any `os.fork()`) and
/// share it between threads.
#[pyclass(name = "LockManager", module = "redis_rlock", frozen)]
pub struct PyLockManager {
    manager: LockManager,
    holds: Holds,
}

impl PyLockManager {
    fn build(
        py: Python<'_>,
        builder: LockManagerBuilder,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let builder = settings::apply(builder, kwargs)?;
        let manager = detached(py, move || builder.build())?;
        Ok(PyLockManager {
            manager,
            holds: Holds::default(),
        })
    }

    fn shorthand(
        &self,
        py: Python<'_>,
        name: &str,
        wait: Option<std::time::Duration>,
        lease: Lease,
        fenced: bool,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        let lock = self.manager.get_lock(name);
        Ok(acquire(py, &lock, wait, lease, fenced, cancel)?.map(Guard::new))
    }
}

#[pymethods]
impl PyLockManager {
    /// Connects to the server at `url` (`redis://`, `rediss://`, `unix://`). The keyword
    /// settings are the Rust builder's (`watchdog_timeout`, `pool_size`, ...).
    #[new]
    #[pyo3(signature = (url, **settings))]
    fn new(py: Python<'_>, url: &str, settings: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        Self::build(py, LockManager::builder(url), settings)
    }

    /// Connects to the master `master_name` that the sentinels at `urls` name.
    #[staticmethod]
    #[pyo3(signature = (urls, master_name, **settings))]
    fn sentinel(
        py: Python<'_>,
        urls: Vec<String>,
        master_name: &str,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        Self::build(
            py,
            LockManager::sentinel_builder(&urls, master_name),
            settings,
        )
    }

    /// Connects to the Redis Cluster that the nodes at `urls` belong to.
    #[staticmethod]
    #[pyo3(signature = (urls, **settings))]
    fn cluster(
        py: Python<'_>,
        urls: Vec<String>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        Self::build(py, LockManager::cluster_builder(&urls), settings)
    }

    /// Waits as long as it takes for lock `name`; watchdog-renewed.
    #[pyo3(signature = (name, cancel=None))]
    fn lock(&self, py: Python<'_>, name: &str, cancel: Option<&PyCancelToken>) -> PyResult<Guard> {
        self.shorthand(py, name, None, Lease::Watchdog, false, cancel)
            .map(acquired)
    }

    /// Waits up to `wait` seconds for lock `name`; `None` when it passed.
    #[pyo3(signature = (name, wait, cancel=None))]
    fn try_lock(
        &self,
        py: Python<'_>,
        name: &str,
        wait: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        self.shorthand(py, name, wait_of(wait)?, Lease::Watchdog, false, cancel)
    }

    /// Waits as long as it takes for lock `name`, held for a fixed `lease`.
    #[pyo3(signature = (name, lease, cancel=None))]
    fn lock_with_lease(
        &self,
        py: Python<'_>,
        name: &str,
        lease: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Guard> {
        self.shorthand(py, name, None, fixed(lease)?, false, cancel)
            .map(acquired)
    }

    /// Waits up to `wait` seconds for lock `name`, held for a fixed `lease`.
    #[pyo3(signature = (name, wait, lease, cancel=None))]
    fn try_lock_with_lease(
        &self,
        py: Python<'_>,
        name: &str,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        self.shorthand(py, name, wait_of(wait)?, fixed(lease)?, false, cancel)
    }

    /// Like `lock()`, with a fencing token on the guard.
    #[pyo3(signature = (name, cancel=None))]
    fn lock_fenced(
        &self,
        py: Python<'_>,
        name: &str,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Guard> {
        self.shorthand(py, name, None, Lease::Watchdog, true, cancel)
            .map(acquired)
    }

    /// Like `try_lock()`, with a fencing token on the guard.
    #[pyo3(signature = (name, wait, cancel=None))]
    fn try_lock_fenced(
        &self,
        py: Python<'_>,
        name: &str,
        wait: &Bound<'_, PyAny>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<Guard>> {
        self.shorthand(py, name, wait_of(wait)?, Lease::Watchdog, true, cancel)
    }

    /// Redisson's `getLock`: a reentrant lock, its waiters woken by pub/sub.
    fn get_lock(&self, name: &str) -> PyLock {
        PyLock::new(
            Arc::new(self.manager.get_lock(name)),
            "lock",
            self.holds.clone(),
        )
    }

    /// Redisson's `getFairLock`: waiters served in arrival order.
    fn get_fair_lock(&self, name: &str) -> PyLock {
        PyLock::new(
            Arc::new(self.manager.get_fair_lock(name)),
            "fair",
            self.holds.clone(),
        )
    }

    /// Redisson's `getSpinLock`: no pub/sub; waiters are woken by client tracking (or poll).
    fn get_spin_lock(&self, name: &str) -> PyLock {
        PyLock::new(
            Arc::new(self.manager.get_spin_lock(name)),
            "spin",
            self.holds.clone(),
        )
    }

    /// redis-py's lock format (`redis.lock.Lock`): a string key holding the owner's token;
    /// nothing published (client tracking wakes the waiters); no fencing.
    fn get_string_lock(&self, name: &str) -> PyLock {
        PyLock::new(
            Arc::new(self.manager.get_string_lock(name)),
            "string",
            self.holds.clone(),
        )
    }

    /// Redisson's `getReadWriteLock`.
    fn get_read_write_lock(&self, name: &str) -> PyReadWriteLock {
        PyReadWriteLock::new(self.manager.get_read_write_lock(name), self.holds.clone())
    }

    /// Redisson's `getSemaphore`.
    fn get_semaphore(&self, name: &str) -> PySemaphore {
        PySemaphore::new(self.manager.get_semaphore(name))
    }

    /// Redisson's `getPermitExpirableSemaphore`.
    fn get_permit_expirable_semaphore(&self, name: &str) -> PyPermitExpirableSemaphore {
        PyPermitExpirableSemaphore::new(self.manager.get_permit_expirable_semaphore(name))
    }

    /// Redisson's `getCountDownLatch`.
    fn get_count_down_latch(&self, name: &str) -> PyCountDownLatch {
        PyCountDownLatch::new(self.manager.get_count_down_latch(name))
    }

    /// Stops the manager: waits end with `Shutdown`, holds taken by `acquire()` are released.
    /// Calls that do not wait (`is_locked()`, `force_unlock()`, releases, ...) keep working,
    /// as the crate's `LockManager::shutdown` has them.
    fn shutdown(&self, py: Python<'_>) {
        let holds = self.holds.take_all();
        let manager = self.manager.clone();
        py.detach(move || {
            drop(holds);
            manager.shutdown();
        });
    }

    /// Whether `shutdown()` was called.
    fn is_shut_down(&self) -> bool {
        self.manager.is_shut_down()
    }

    /// The id Redisson-style owner fields start with (`<client_id>:<thread>`).
    #[getter]
    fn client_id(&self) -> &str {
        self.manager.client_id()
    }

    /// The watchdog's lease in seconds.
    #[getter]
    fn watchdog_timeout(&self) -> f64 {
        duration::to_py(self.manager.watchdog_timeout())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.shutdown(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let id = repr::string(py, self.manager.client_id());
        format!("LockManager(client_id={id})")
    }
}

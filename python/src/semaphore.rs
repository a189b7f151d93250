//! `redis_rlock.Semaphore` and `redis_rlock.PermitExpirableSemaphore`.

use pyo3::prelude::*;
use pyo3::types::PyAny;
use redis_rlock::{PermitExpirableSemaphore, Semaphore, WaitOptions};

use crate::cancel::PyCancelToken;
use crate::count::Count;
use crate::duration;
use crate::repr;
use crate::wait::{blocking, quick};

/// Redisson's `RSemaphore`: permits in Redis, shared by every client.
#[pyclass(name = "Semaphore", module = "redis_rlock", frozen)]
pub struct PySemaphore {
    semaphore: Semaphore,
}

impl PySemaphore {
    pub fn new(semaphore: Semaphore) -> Self {
        PySemaphore { semaphore }
    }
}

#[pymethods]
impl PySemaphore {
    /// The semaphore's name, which is also its Redis key.
    #[getter]
    fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Sets the number of permits if none is set yet; whether it did.
    fn try_set_permits(&self, py: Python<'_>, permits: Count<u32>) -> PyResult<bool> {
        quick(py, || self.semaphore.try_set_permits(permits.0))
    }

    /// Takes `permits`, waiting as long as it takes.
    #[pyo3(
        signature = (permits=Count(1), cancel=None),
        text_signature = "(self, permits=1, cancel=None)"
    )]
    fn acquire(
        &self,
        py: Python<'_>,
        permits: Count<u32>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<()> {
        blocking(py, None, cancel, |left, token| {
            let mut options = WaitOptions::new().cancel_token(token);
            if let Some(left) = left {
                options = options.wait(left);
            }
            Ok(self
                .semaphore
                .acquire_with(permits.0, options)?
                .then_some(()))
        })
        .map(drop)
    }

    /// Takes `permits` if they become free within `wait` seconds (0: one attempt); whether it did.
    #[pyo3(
        signature = (permits=Count(1), wait=None, cancel=None),
        text_signature = "(self, permits=1, wait=0.0, cancel=None)"
    )]
    fn try_acquire(
        &self,
        py: Python<'_>,
        permits: Count<u32>,
        wait: Option<&Bound<'_, PyAny>>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<bool> {
        let wait = duration::opt_from_py(wait, "wait")?.unwrap_or_default();
        let taken = blocking(py, Some(wait), cancel, |left, token| {
            let options = WaitOptions::new()
                .cancel_token(token)
                .wait(left.unwrap_or_default());
            Ok(self
                .semaphore
                .acquire_with(permits.0, options)?
                .then_some(()))
        })?;
        Ok(taken.is_some())
    }

    /// Gives back `permits` (any client may release).
    #[pyo3(signature = (permits=Count(1)), text_signature = "(self, permits=1)")]
    fn release(&self, py: Python<'_>, permits: Count<u32>) -> PyResult<()> {
        quick(py, || self.semaphore.release(permits.0))
    }

    /// The permits free now.
    fn available_permits(&self, py: Python<'_>) -> PyResult<u64> {
        quick(py, || self.semaphore.available_permits())
    }

    /// Adds `permits` (negative: removes).
    fn add_permits(&self, py: Python<'_>, permits: Count<i32>) -> PyResult<()> {
        quick(py, || self.semaphore.add_permits(permits.0))
    }

    /// Takes every free permit; how many.
    fn drain_permits(&self, py: Python<'_>) -> PyResult<u64> {
        quick(py, || self.semaphore.drain_permits())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Semaphore(name={})",
            repr::string(py, self.semaphore.name())
        )
    }
}

/// Redisson's `RPermitExpirableSemaphore`: each permit has an id and may have a lease.
#[pyclass(name = "PermitExpirableSemaphore", module = "redis_rlock", frozen)]
pub struct PyPermitExpirableSemaphore {
    semaphore: PermitExpirableSemaphore,
}

impl PyPermitExpirableSemaphore {
    pub fn new(semaphore: PermitExpirableSemaphore) -> Self {
        PyPermitExpirableSemaphore { semaphore }
    }
}

#[pymethods]
impl PyPermitExpirableSemaphore {
    /// The semaphore's name, which is also its Redis key.
    #[getter]
    fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Sets the number of permits if none is set yet; whether it did.
    fn try_set_permits(&self, py: Python<'_>, permits: Count<u32>) -> PyResult<bool> {
        quick(py, || self.semaphore.try_set_permits(permits.0))
    }

    /// Sets the number of permits.
    fn set_permits(&self, py: Python<'_>, permits: Count<u32>) -> PyResult<()> {
        quick(py, || self.semaphore.set_permits(permits.0))
    }

    /// Adds `permits` (negative: removes).
    fn add_permits(&self, py: Python<'_>, permits: Count<i32>) -> PyResult<()> {
        quick(py, || self.semaphore.add_permits(permits.0))
    }

    /// Takes one permit, waiting as long as it takes; its id. With `lease` seconds, the
    /// permit comes back by itself that long after unless released first.
    #[pyo3(signature = (lease=None, cancel=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        lease: Option<&Bound<'_, PyAny>>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<String> {
        let lease = duration::opt_from_py(lease, "lease")?;
        let id = self.take(py, None, lease, cancel)?;
        Ok(id.expect("a wait without limit returns a permit or an error"))
    }

    /// Takes one permit if one becomes free within `wait` seconds; its id, or `None`.
    #[pyo3(
        signature = (wait=None, lease=None, cancel=None),
        text_signature = "(self, wait=0.0, lease=None, cancel=None)"
    )]
    fn try_acquire(
        &self,
        py: Python<'_>,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<String>> {
        let wait = duration::opt_from_py(wait, "wait")?.unwrap_or_default();
        let lease = duration::opt_from_py(lease, "lease")?;
        self.take(py, Some(wait), lease, cancel)
    }

    /// Gives back permit `id`; `PermitNotHeld` if it is not acquired, `InvalidArgument` if
    /// `id` is not a permit id (32 hex characters).
    fn release(&self, py: Python<'_>, id: &str) -> PyResult<()> {
        quick(py, || self.semaphore.release(id))
    }

    /// Gives back permit `id`; whether it was acquired. `InvalidArgument` if `id` is not a
    /// permit id.
    fn try_release(&self, py: Python<'_>, id: &str) -> PyResult<bool> {
        quick(py, || self.semaphore.try_release(id))
    }

    /// Sets permit `id`'s lease to `lease` seconds from now; whether it was acquired.
    fn update_lease_time(
        &self,
        py: Python<'_>,
        id: &str,
        lease: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let lease = duration::from_py(lease, "lease")?;
        quick(py, || self.semaphore.update_lease_time(id, lease))
    }

    /// The permits free now.
    fn available_permits(&self, py: Python<'_>) -> PyResult<u64> {
        quick(py, || self.semaphore.available_permits())
    }

    /// The permits acquired now.
    fn acquired_permits(&self, py: Python<'_>) -> PyResult<u64> {
        quick(py, || self.semaphore.acquired_permits())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let name = repr::string(py, self.semaphore.name());
        format!("PermitExpirableSemaphore(name={name})")
    }
}

impl PyPermitExpirableSemaphore {
    fn take(
        &self,
        py: Python<'_>,
        wait: Option<std::time::Duration>,
        lease: Option<std::time::Duration>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<Option<String>> {
        blocking(py, wait, cancel, |left, token| {
            let mut options = WaitOptions::new().cancel_token(token);
            if let Some(left) = left {
                options = options.wait(left);
            }
            self.semaphore.acquire_with(lease, options)
        })
    }
}

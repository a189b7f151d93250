//! `redis_rlock.CountDownLatch`.

use pyo3::prelude::*;
use pyo3::types::PyAny;
use redis_rlock::{CountDownLatch, WaitOptions};

use crate::cancel::PyCancelToken;
use crate::count::Count;
use crate::duration;
use crate::repr;
use crate::wait::{blocking, quick};

/// Redisson's `RCountDownLatch`: waiters are released when the count reaches zero.
#[pyclass(name = "CountDownLatch", module = "redis_rlock", frozen)]
pub struct PyCountDownLatch {
    latch: CountDownLatch,
}

impl PyCountDownLatch {
    pub fn new(latch: CountDownLatch) -> Self {
        PyCountDownLatch { latch }
    }
}

#[pymethods]
impl PyCountDownLatch {
    /// The latch's name, which is also its Redis key.
    #[getter]
    fn name(&self) -> &str {
        self.latch.name()
    }

    /// Sets the count if the latch is not set (zero); whether it did.
    fn try_set_count(&self, py: Python<'_>, count: Count<u64>) -> PyResult<bool> {
        quick(py, || self.latch.try_set_count(count.0))
    }

    /// Decrements the count; at zero the waiters are released.
    fn count_down(&self, py: Python<'_>) -> PyResult<()> {
        quick(py, || self.latch.count_down())
    }

    /// The count now.
    fn get_count(&self, py: Python<'_>) -> PyResult<u64> {
        quick(py, || self.latch.count())
    }

    /// Waits until the count is zero, or `timeout` seconds (`None`: no limit); whether it is.
    #[pyo3(signature = (timeout=None, cancel=None))]
    fn wait(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        cancel: Option<&PyCancelToken>,
    ) -> PyResult<bool> {
        let timeout = duration::opt_from_py(timeout, "timeout")?;
        let done = blocking(py, timeout, cancel, |left, token| {
            let mut options = WaitOptions::new().cancel_token(token);
            if let Some(left) = left {
                options = options.wait(left);
            }
            Ok(self.latch.wait_with(options)?.then_some(()))
        })?;
        Ok(done.is_some())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "CountDownLatch(name={})",
            repr::string(py, self.latch.name())
        )
    }
}

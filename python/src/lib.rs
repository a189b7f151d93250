//! `redis_rlock._native`: the Python package's native module, a thin layer over the crate
//! redis-rlock. Python imports it through `redis_rlock` (python/redis_rlock/__init__.py).
//!
//! Every call that can wait releases the GIL (`wait.rs`); a wait on the main thread is also
//! ended by Ctrl-C (`signals.rs`). The owner of a hold is the OS thread that calls, which is
//! the Python thread: pyo3 runs a call on the thread that made it.

#![deny(missing_docs)]

mod cancel;
mod count;
mod duration;
mod errors;
mod guard;
mod held;
mod latch;
mod lock;
mod lost;
mod manager;
mod repr;
mod semaphore;
mod settings;
mod signals;
mod wait;

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};

/// `Seconds`, the type of every duration argument: `Union[int, float, datetime.timedelta]`.
fn seconds(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let timedelta = py.import("datetime")?.getattr("timedelta")?;
    let members = PyTuple::new(
        py,
        [
            py.get_type::<PyInt>().into_any(),
            py.get_type::<PyFloat>().into_any(),
            timedelta,
        ],
    )?;
    py.import("typing")?.getattr("Union")?.get_item(members)
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<manager::PyLockManager>()?;
    module.add_class::<lock::PyLock>()?;
    module.add_class::<lock::PyReadWriteLock>()?;
    module.add_class::<guard::Guard>()?;
    module.add_class::<lost::LostEvent>()?;
    module.add_class::<cancel::PyCancelToken>()?;
    module.add_class::<semaphore::PySemaphore>()?;
    module.add_class::<semaphore::PyPermitExpirableSemaphore>()?;
    module.add_class::<latch::PyCountDownLatch>()?;
    module.add("Seconds", seconds(module.py())?)?;
    Ok(())
}

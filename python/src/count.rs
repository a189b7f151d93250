//! Counts (permits, a latch's count, a pool size) from Python `int`s: one out of the Rust
//! type's range, a negative permit count say, is an `InvalidArgument` (a `ValueError`), not
//! the `OverflowError` a plain extraction raises.

use pyo3::prelude::*;

use crate::errors;

/// An integer of type `T`, range-checked with a clear error.
pub struct Count<T>(pub T);

/// The range of a count's Rust type, for the error message.
pub trait Range: TryFrom<i64> {
    /// The smallest value.
    const MIN: i64;
    /// The largest value, capped at `i64::MAX`.
    const MAX: i64;
}

impl Range for u32 {
    const MIN: i64 = 0;
    const MAX: i64 = u32::MAX as i64;
}

impl Range for i32 {
    const MIN: i64 = i32::MIN as i64;
    const MAX: i64 = i32::MAX as i64;
}

impl Range for u64 {
    const MIN: i64 = 0;
    const MAX: i64 = i64::MAX;
}

impl Range for usize {
    const MIN: i64 = 0;
    const MAX: i64 = i64::MAX;
}

impl<'a, 'py, T: Range> FromPyObject<'a, 'py> for Count<T> {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // A non-int is a TypeError here, as before.
        let n: i64 = value.extract()?;
        T::try_from(n)
            .map(Count)
            .map_err(|_| out_of_range::<T>(value.py(), n))
    }
}

fn out_of_range<T: Range>(py: Python<'_>, n: i64) -> PyErr {
    let (min, max) = (T::MIN, T::MAX);
    errors::invalid(py, "count", format!("{n} is not between {min} and {max}"))
}

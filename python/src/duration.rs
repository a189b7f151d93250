//! Durations as Python gives them: seconds as an `int` or `float`, or a `datetime.timedelta`.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

use crate::errors;

/// The longest duration accepted, 2**62 seconds: far beyond any real wait, and short enough
/// that a deadline `Instant::now() + d` can never overflow (which panics).
pub const LONGEST: Duration = Duration::from_secs(1 << 62);

/// `value` as a duration; `what` names the argument in errors. A negative, NaN or infinite
/// number, or one over [`LONGEST`], is an `InvalidArgument` (a `ValueError`); anything else
/// than a number or a `timedelta` a `TypeError`.
pub fn from_py(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let py = value.py();
    let seconds: f64 = if value.is_instance_of::<PyBool>() {
        return Err(type_error(value, what));
    } else if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyInt>() {
        value.extract()?
    } else if value.is_instance(&timedelta(py)?)? {
        value.call_method0("total_seconds")?.extract()?
    } else {
        return Err(type_error(value, what));
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(errors::invalid(
            py,
            what,
            format!("{seconds} is not a non-negative, finite number of seconds"),
        ));
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d <= LONGEST => Ok(d),
        _ => Err(errors::invalid(
            py,
            what,
            format!("{seconds} seconds is longer than the longest accepted, 2**62"),
        )),
    }
}

/// An optional duration: `None` stays `None`.
pub fn opt_from_py(value: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Duration>> {
    match value {
        Some(value) if !value.is_none() => from_py(value, what).map(Some),
        _ => Ok(None),
    }
}

/// A duration given back to Python: float seconds.
pub fn to_py(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

fn timedelta(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import("datetime")?.getattr("timedelta")
}

fn type_error(value: &Bound<'_, PyAny>, what: &str) -> PyErr {
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!(
        "{what} must be seconds (int or float) or a datetime.timedelta, not {type_name}"
    ))
}

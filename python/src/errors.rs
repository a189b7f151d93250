//! The crate's errors as the exceptions of `redis_rlock._errors`, one class per kind.

use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use redis_rlock::Error;

/// `redis_rlock._errors`, imported once: the classes are Python's so that they can also derive
/// from `TimeoutError`, `ConnectionError` and `ValueError`.
static ERRORS: OnceLock<Py<PyModule>> = OnceLock::new();

/// The exception class `name` of `redis_rlock._errors`.
pub fn class(py: Python<'_>, name: &str) -> PyResult<Py<PyType>> {
    let module = match ERRORS.get() {
        Some(module) => module.bind(py).clone(),
        None => {
            let module = py.import("redis_rlock._errors")?;
            let _ = ERRORS.set(module.clone().unbind());
            module
        }
    };
    Ok(module.getattr(name)?.extract()?)
}

/// An exception of class `name` with `message`.
pub fn new(py: Python<'_>, name: &str, message: String) -> PyErr {
    match class(py, name) {
        Ok(cls) => PyErr::from_type(cls.into_bound(py), message),
        Err(err) => err,
    }
}

/// The exception for `err`: the class of its kind, its message as the crate words it.
pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    new(py, class_name(&err), err.to_string())
}

/// Which class answers for `err`. `Error::Nodes` (several nodes failed) is classed by the
/// crate's predicates, which answer for the last node asked.
fn class_name(err: &Error) -> &'static str {
    match err {
        Error::InvalidName { .. } => "InvalidName",
        Error::InvalidUrl { .. } => "InvalidUrl",
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::PermitNotHeld { .. } => "PermitNotHeld",
        Error::NotHeld { .. } => "NotHeld",
        Error::Forked { .. } => "Forked",
        Error::Cancelled { .. } => "Cancelled",
        Error::Shutdown { .. } => "Shutdown",
        _ if err.is_not_replicated() => "NotReplicated",
        _ if err.is_timeout() => "Timeout",
        _ if err.is_connection_error() => "ConnectionFailed",
        _ if err.is_wrong_type() => "WrongType",
        _ if err.is_invalid_argument() => "InvalidArgument",
        _ if err.redis_failure().is_some() => "RedisError",
        _ => "LockError",
    }
}

/// `threading.RLock`'s error for a release by a thread that holds nothing.
pub fn unacquired() -> PyErr {
    PyRuntimeError::new_err("cannot release un-acquired lock")
}

/// An `InvalidArgument` (also a `ValueError`) about `what`.
pub fn invalid(py: Python<'_>, what: &str, reason: impl std::fmt::Display) -> PyErr {
    new(py, "InvalidArgument", format!("invalid {what}: {reason}"))
}

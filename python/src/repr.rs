//! Pieces of `__repr__` strings written as Python writes them (`'name'`, `True`, `None`).

use pyo3::prelude::*;
use pyo3::types::PyString;

/// `text` as Python's `repr()` quotes it; Rust's `{:?}` quotes and escapes differently.
pub fn string(py: Python<'_>, text: &str) -> String {
    PyString::new(py, text)
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| format!("{text:?}"))
}

/// `True` or `False`.
pub fn flag(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

/// An `int` or `None`.
pub fn number(value: Option<u64>) -> String {
    value.map_or_else(|| "None".to_owned(), |n| n.to_string())
}

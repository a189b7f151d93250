//! `LockManager(url, **settings)`: the builder's settings as snake-case keywords.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use redis_rlock::{LockManagerBuilder, PubSubProtocol, ShardedPubSubMode};

use crate::count::Count;
use crate::duration;

/// The keywords accepted, for the error on an unknown one.
const NAMES: &[&str] = &[
    "watchdog_timeout",
    "pool_size",
    "connect_timeout",
    "response_timeout",
    "fair_lock_wait_timeout",
    "replica_sync",
    "replica_sync_timeout",
    "tls_root_certificate",
    "pubsub_protocol",
    "sharded_pubsub_mode",
    "database",
];

/// `builder` with every setting of `settings` applied; an unknown keyword is a `TypeError`.
pub fn apply(
    mut builder: LockManagerBuilder,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<LockManagerBuilder> {
    let Some(settings) = settings else {
        return Ok(builder);
    };
    for (key, value) in settings.iter() {
        let key: String = key.extract()?;
        builder = one(builder, &key, &value)?;
    }
    Ok(builder)
}

fn one(b: LockManagerBuilder, key: &str, v: &Bound<'_, PyAny>) -> PyResult<LockManagerBuilder> {
    Ok(match key {
        "watchdog_timeout" => b.watchdog_timeout(duration::from_py(v, key)?),
        "pool_size" => b.pool_size(v.extract::<Count<usize>>()?.0),
        "connect_timeout" => b.connect_timeout(duration::from_py(v, key)?),
        "response_timeout" => b.response_timeout(duration::from_py(v, key)?),
        "fair_lock_wait_timeout" => b.fair_lock_wait_timeout(duration::from_py(v, key)?),
        "replica_sync" => b.replica_sync(v.extract()?),
        "replica_sync_timeout" => b.replica_sync_timeout(duration::from_py(v, key)?),
        "tls_root_certificate" => b.tls_root_certificate(pem(v)?),
        "pubsub_protocol" => b.pubsub_protocol(protocol(&v.extract::<String>()?)?),
        "sharded_pubsub_mode" => b.sharded_pubsub_mode(sharded(&v.extract::<String>()?)?),
        "database" => b.database(v.extract::<Count<u32>>()?.0),
        _ => {
            return Err(PyTypeError::new_err(format!(
                "LockManager() got an unexpected keyword argument {key:?} (settings: {})",
                NAMES.join(", ")
            )))
        }
    })
}

/// A PEM certificate as `bytes` or `str`.
fn pem(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = v.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(text) = v.cast::<PyString>() {
        return Ok(text.extract::<String>()?.into_bytes());
    }
    Err(PyTypeError::new_err(
        "tls_root_certificate must be the PEM text as bytes or str",
    ))
}

fn protocol(name: &str) -> PyResult<PubSubProtocol> {
    match name {
        "auto" => Ok(PubSubProtocol::Auto),
        "resp3" => Ok(PubSubProtocol::Resp3),
        "resp2" => Ok(PubSubProtocol::Resp2),
        _ => Err(PyValueError::new_err(format!(
            "pubsub_protocol must be \"auto\", \"resp3\" or \"resp2\", not {name:?}"
        ))),
    }
}

fn sharded(name: &str) -> PyResult<ShardedPubSubMode> {
    match name {
        "auto" => Ok(ShardedPubSubMode::Auto),
        "on" => Ok(ShardedPubSubMode::On),
        "off" => Ok(ShardedPubSubMode::Off),
        _ => Err(PyValueError::new_err(format!(
            "sharded_pubsub_mode must be \"auto\", \"on\" or \"off\", not {name:?}"
        ))),
    }
}

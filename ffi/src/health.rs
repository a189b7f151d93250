//! A manager's health (whether its locks' renewals work) and its eviction risk, for C.

use std::ffi::c_int;
use std::time::Duration;

use super::boundary::{guarded, redis_rlock_result, write_out, Failure};
use super::manager::{manager_arg, redis_rlock_manager};
use redis_rlock::Health;

/// Whether a manager's watchdog-renewed locks are being renewed, the C form of the Rust
/// `Health` (its docs give every transition). The numbers are stable.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum redis_rlock_health {
    /// Every renewal answered (the state of a new manager).
    REDIS_RLOCK_HEALTHY = 0,
    /// Renewals are failing (Redis unreachable or too slow); no lock was lost yet: each
    /// guard's own lease says how long it has.
    REDIS_RLOCK_SUSPENDED = 1,
    /// A watchdog-renewed lock was lost (its lease ran out unrenewed, or a renewal found it
    /// gone); until a later renewal sweep answers in full and finds none gone.
    REDIS_RLOCK_LOST = 2,
}

use redis_rlock_health::*;

impl From<Health> for redis_rlock_health {
    fn from(health: Health) -> Self {
        match health {
            Health::Suspended { .. } => REDIS_RLOCK_SUSPENDED,
            Health::Lost { .. } => REDIS_RLOCK_LOST,
            // Healthy, and any state a later version adds.
            _ => REDIS_RLOCK_HEALTHY,
        }
    }
}

/// A stand-in of the Rust state for a C state, to compare states with.
fn health_of(state: c_int) -> Result<Health, Failure> {
    let since = std::time::SystemTime::UNIX_EPOCH;
    match state {
        0 => Ok(Health::Healthy),
        1 => Ok(Health::Suspended {
            since,
            failed_sweeps: 0,
        }),
        2 => Ok(Health::Lost {
            since,
            holds_lost: 0,
        }),
        other => Err(Failure::invalid(format!(
            "known is {other}, not a redis_rlock_health"
        ))),
    }
}

/// Writes the health of `m` to `*out`. No I/O.
///
/// Errors: `REDIS_RLOCK_INVALID_ARGUMENT` when `m` or `out` is NULL.
///
/// # Safety
/// `m` is NULL or a live manager; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_health(
    m: *const redis_rlock_manager,
    out: *mut redis_rlock_health,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (both): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let health = redis_rlock_health::from(manager.health());
        unsafe { write_out("out", out, health) }
    })
}

/// Waits up to `timeout_ms` (`REDIS_RLOCK_WAIT_FOREVER`: no limit) for the health of `m` to
/// change, and writes it to `*out` then, or at the timeout (check `*out` against `known`).
/// Returns at once when the health is not `known` already. A state left and entered again
/// before the call is not seen.
///
/// Errors: `REDIS_RLOCK_INVALID_ARGUMENT` when `m` or `out` is NULL or `known` is no
/// `redis_rlock_health`; `REDIS_RLOCK_SHUTDOWN` when `m` was shut down (the wait ends then,
/// with `*out` written).
///
/// # Safety
/// `m` is NULL or a live manager; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_health_wait(
    m: *const redis_rlock_manager,
    known: c_int,
    timeout_ms: u64,
    out: *mut redis_rlock_health,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY: the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        let known = health_of(known)?;
        let health = manager.wait_health_change(&known, Duration::from_millis(timeout_ms));
        // SAFETY: checked above; the caller's contract.
        unsafe { write_out("out", out, redis_rlock_health::from(health))? };
        if manager.is_shut_down() {
            return Err(Failure::new(
                redis_rlock_result::REDIS_RLOCK_SHUTDOWN,
                "the manager was shut down",
            ));
        }
        Ok(())
    })
}

/// Writes to `*out` whether some master of `m` may evict lock keys: a `volatile-*` or
/// `allkeys-*` `maxmemory-policy` with `maxmemory` set, as read when `m` was created (an
/// evicted lock is free for anyone). `false` when the policy could not be read. No I/O.
///
/// Errors: `REDIS_RLOCK_INVALID_ARGUMENT` when `m` or `out` is NULL.
///
/// # Safety
/// `m` is NULL or a live manager; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_eviction_risk(
    m: *const redis_rlock_manager,
    out: *mut bool,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (both): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let risk = manager.eviction_risk();
        unsafe { write_out("out", out, risk) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_c_state_stands_for_its_rust_state_and_others_are_refused() {
        for state in [REDIS_RLOCK_HEALTHY, REDIS_RLOCK_SUSPENDED, REDIS_RLOCK_LOST] {
            let rust = health_of(state as c_int).ok().unwrap();
            assert_eq!(redis_rlock_health::from(rust), state);
        }
        assert!(health_of(3).is_err());
        assert!(health_of(-1).is_err());
    }

    #[test]
    fn null_arguments_are_invalid() {
        let mut out = REDIS_RLOCK_LOST;
        // SAFETY: NULL is allowed.
        let result = unsafe { redis_rlock_manager_health(std::ptr::null(), &mut out) };
        assert_eq!(result, redis_rlock_result::REDIS_RLOCK_INVALID_ARGUMENT);
        assert_eq!(out, REDIS_RLOCK_LOST);
    }
}

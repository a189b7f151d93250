//! The limits on durations (leases, waits, the watchdog timeout) and the checks that apply
//! them, for the settings and for every call that takes a duration.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest lease or timeout accepted: 100 years (of 365 days), 3,153,600,000,000 ms.
///
/// Lease deadlines are kept in nanoseconds of the boot clock in a `u64` (see `clock.rs`),
/// which holds about 584 years. A longer lease made the deadline saturate, so every acquire
/// looked as if its reply had come too late to leave a useful lease, and was released and
/// retried forever. 100 years leaves the boot clock more than 480 years of uptime before a
/// deadline could saturate, and is far below the limits of Redis' millisecond expiry times
/// and of exact Lua numbers (2^53).
pub(crate) const MAX_LEASE_MILLIS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// The longest wait accepted: 2^52 ms (about 142,000 years). Waits end on
/// `std::time::Instant`, which holds them exactly, and are never sent to Redis; the limit only
/// keeps `Instant::now() + wait` from overflowing. `lock()` waits without limit.
pub(crate) const MAX_WAIT_MILLIS: u64 = 1 << 52;

/// The shortest watchdog timeout accepted, in ms.
///
/// Renewals go out every third of the timeout, and each must be sent, answered and seen before
/// the lease runs out, so every stall of the watchdog thread or of Redis eats into two thirds
/// of it. Measured on a shared 2-core VM (loopback Redis, debug build, 8 or 16 holds renewed
/// for 3 s per run, other developers building at the same time): with no added load, 3, 5, 10
/// and 30 ms timeouts lost every hold in a run; with 4 to 6 busy threads added, 50, 100, 150
/// and 200 ms each lost every hold in at least one of four runs, while 300 and 500 ms never
/// lost one (about a dozen runs each, 2 to 8 busy threads). The worst stall seen under that
/// load was a 173 ms PING round trip (and an 85 ms late wake-up from a 10 ms sleep). 500 ms
/// leaves about 330 ms for a renewal: about twice that stall, and 2.5 times the longest
/// timeout that lost holds. Real deployments should keep the 30 s default.
pub(crate) const MIN_WATCHDOG_TIMEOUT_MILLIS: u64 = 500;

/// Converts a duration to whole milliseconds for Redis, refusing zero, sub-millisecond and
/// out-of-range values (above [`MAX_LEASE_MILLIS`]) with an error that names the argument.
pub(crate) fn to_millis(what: &'static str, d: Duration) -> Result<u64> {
    let ms = d.as_millis();
    if ms == 0 {
        return Err(Error::invalid(
            what,
            format!("{d:?} is shorter than Redis' resolution of 1 ms"),
        ));
    }
    if ms > u128::from(MAX_LEASE_MILLIS) {
        return Err(Error::invalid(
            what,
            format!("{d:?} is longer than the maximum of {MAX_LEASE_MILLIS} ms (100 years)"),
        ));
    }
    Ok(ms as u64)
}

/// Checks a wait: zero is allowed (one attempt), huge values are refused.
pub(crate) fn check_wait(wait: Duration) -> Result<()> {
    if wait.as_millis() > u128::from(MAX_WAIT_MILLIS) {
        return Err(Error::invalid(
            "wait",
            format!(
                "{wait:?} is longer than the maximum of {MAX_WAIT_MILLIS} ms; to wait without \
                 limit, use the call that takes no wait where there is one (`lock()`, \
                 `acquire()`), or wait again"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_refuses_zero_submillisecond_and_huge() {
        assert!(to_millis("lease", Duration::ZERO).is_err());
        assert!(to_millis("lease", Duration::from_micros(999)).is_err());
        assert!(to_millis("lease", Duration::MAX).is_err());
        assert_eq!(to_millis("lease", Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(
            to_millis("lease", Duration::from_millis(MAX_LEASE_MILLIS)).unwrap(),
            MAX_LEASE_MILLIS
        );
        let just_above = Duration::from_millis(MAX_LEASE_MILLIS + 1);
        let err = to_millis("lease", just_above).unwrap_err();
        assert!(err.to_string().contains("3153600000000 ms"), "{err}");
        assert!(check_wait(Duration::from_millis(MAX_WAIT_MILLIS)).is_ok());
        assert!(check_wait(Duration::from_millis(MAX_WAIT_MILLIS + 1)).is_err());
    }
}

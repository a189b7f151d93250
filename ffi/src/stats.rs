//! `redis_rlock_stats`: a manager's counters for C programs' metrics and logs.

use super::boundary::{guarded, redis_rlock_result, write_out};
use super::manager::{manager_arg, redis_rlock_manager};
use redis_rlock::Stats;

/// A snapshot of a manager's counters since it was created (`redis_rlock_manager_stats`), the
/// C form of the Rust `Stats`. Every counter only grows; report rates as differences between
/// two snapshots.
///
/// They count what this client sends and sees, not what Redis executes: a script call is one
/// command however many commands it runs inside Redis.
///
/// The library writes the whole struct, so its size is part of the ABI: fields are only ever
/// added at the end, in a release with a new soname.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct redis_rlock_stats {
    /// Commands sent to Redis, on pooled and pub/sub connections alike; each command of a
    /// pipeline counts.
    pub commands: u64,
    /// Round trips to Redis: a pipeline of many commands counts once.
    pub round_trips: u64,
    /// Successful acquisitions (re-entries included).
    pub acquisitions: u64,
    /// Acquisitions that had to wait: the lock was held when first tried.
    pub waits: u64,
    /// The time those waits took, added up, in microseconds.
    pub wait_time_us: u64,
    /// Renewal sweeps the watchdog sent (each one round trip for all locks due).
    pub renewal_sweeps: u64,
    /// Holds renewed (one per hold per sweep).
    pub renewals: u64,
    /// Renewal sweeps that failed (Redis unreachable or too slow); they are retried.
    pub renewal_failures: u64,
    /// Holds found lost: gone at a renewal (expired, force-unlocked or taken over), or whose
    /// confirmed lease ran out without a renewal.
    pub holds_lost: u64,
    /// Unlock messages received for locks that local threads wait for.
    pub wakeups: u64,
    /// Connections opened again after one was found dead (the pub/sub listener's and pooled
    /// ones).
    pub reconnects: u64,
    /// Releases that acquired the lock for the next local thread in the same script call.
    pub local_handoffs: u64,
    /// Releases that left the lock free because other clients were waiting for it.
    pub yields: u64,
    /// Releases that granted the lock to a waiting client of this library elsewhere, in the
    /// same script call.
    pub grants_given: u64,
    /// Acquisitions granted by another client's release, taken without a request of their own.
    pub grants_taken: u64,
}

impl From<Stats> for redis_rlock_stats {
    fn from(stats: Stats) -> Self {
        // `Stats` is non-exhaustive, so a counter added to it would compile here unnoticed:
        // the test `the_c_struct_has_every_counter` fails until the C struct has it too.
        let Stats {
            commands,
            round_trips,
            acquisitions,
            waits,
            wait_time,
            renewal_sweeps,
            renewals,
            renewal_failures,
            holds_lost,
            wakeups,
            reconnects,
            local_handoffs,
            yields,
            grants_given,
            grants_taken,
            ..
        } = stats;
        redis_rlock_stats {
            commands,
            round_trips,
            acquisitions,
            waits,
            // Saturates after 584,000 years of waiting.
            wait_time_us: u64::try_from(wait_time.as_micros()).unwrap_or(u64::MAX),
            renewal_sweeps,
            renewals,
            renewal_failures,
            holds_lost,
            wakeups,
            reconnects,
            local_handoffs,
            yields,
            grants_given,
            grants_taken,
        }
    }
}

/// Copies the manager's counters into `*out`: no I/O, cheap enough to call for every metrics
/// scrape. The counters cover the manager since it was created, with every thread using it.
///
/// Errors: `REDIS_RLOCK_INVALID_ARGUMENT` when `m` or `out` is NULL (`*out` is then left as it
/// was).
///
/// # Safety
/// `m` is NULL or a live manager; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_stats(
    m: *const redis_rlock_manager,
    out: *mut redis_rlock_stats,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (both): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let stats = redis_rlock_stats::from(manager.stats());
        unsafe { write_out("out", out, stats) }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_counter_is_copied_and_the_wait_time_is_in_microseconds() {
        // Field by field: `Stats` is non-exhaustive, so no struct literal from this crate.
        let mut stats = Stats::default();
        stats.commands = 1;
        stats.round_trips = 2;
        stats.acquisitions = 3;
        stats.waits = 4;
        stats.wait_time = Duration::from_nanos(5_678_999);
        stats.renewal_sweeps = 6;
        stats.renewals = 7;
        stats.renewal_failures = 8;
        stats.holds_lost = 9;
        stats.wakeups = 10;
        stats.reconnects = 11;
        stats.local_handoffs = 12;
        stats.yields = 13;
        let c = redis_rlock_stats::from(stats);
        assert_eq!(
            [
                c.commands,
                c.round_trips,
                c.acquisitions,
                c.waits,
                c.wait_time_us,
                c.renewal_sweeps,
                c.renewals,
                c.renewal_failures,
                c.holds_lost,
                c.wakeups,
                c.reconnects,
                c.local_handoffs,
                c.yields
            ],
            [1, 2, 3, 4, 5_678, 6, 7, 8, 9, 10, 11, 12, 13]
        );
        let mut forever = Stats::default();
        forever.wait_time = Duration::MAX;
        assert_eq!(redis_rlock_stats::from(forever).wait_time_us, u64::MAX);
    }

    /// The field names a `{:?}` of a struct shows, in order.
    fn field_names(debug: &str) -> Vec<String> {
        let body = &debug[debug.find('{').expect("a struct") + 1..debug.rfind('}').unwrap()];
        body.split(',')
            .filter_map(|field| field.split(':').next())
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .collect()
    }

    #[test]
    fn the_c_struct_has_every_counter() {
        let rust = field_names(&format!("{:?}", Stats::default()));
        let c = field_names(&format!("{:?}", redis_rlock_stats::default()));
        // The one rename: C has no Duration, so the wait time is in microseconds.
        let rust: Vec<String> = rust
            .into_iter()
            .map(|name| match name.as_str() {
                "wait_time" => "wait_time_us".to_owned(),
                _ => name,
            })
            .collect();
        assert!(c.len() >= 13, "the test reads the fields: {c:?}");
        // As sets: the C struct's order is its ABI (fields only ever added at its end),
        // while Rust's may change freely.
        let (mut rust, mut c) = (rust, c);
        rust.sort();
        c.sort();
        assert_eq!(
            c, rust,
            "redis_rlock_stats must have every counter of Stats"
        );
    }

    #[test]
    fn null_arguments_are_invalid_and_leave_out_alone() {
        let mut out = redis_rlock_stats {
            commands: 42,
            ..redis_rlock_stats::default()
        };
        // SAFETY: NULL is allowed for both arguments.
        let result = unsafe { redis_rlock_manager_stats(std::ptr::null(), &mut out) };
        assert_eq!(result, redis_rlock_result::REDIS_RLOCK_INVALID_ARGUMENT);
        assert_eq!(out.commands, 42);
    }
}

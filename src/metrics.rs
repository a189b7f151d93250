//! Publishing a manager's counters through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`), so they reach whatever recorder the program installed (Prometheus,
//! StatsD, ...).
//!
//! The manager only keeps plain atomic counters ([`Stats`]) and never calls the facade by
//! itself: a lock call should not pay for a recorder's map lookups, and a program without
//! metrics should not pay for the crate. A [`MetricsExporter`] copies a snapshot into the
//! facade when the program asks, typically every few seconds from a thread of its own:
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_rlock::{metrics::MetricsExporter, LockManager};
//!
//! // Install the recorder first (metrics_exporter_prometheus::PrometheusBuilder, ...): the
//! // exporter describes its metrics to the recorder installed when it is created.
//! let manager = LockManager::new("redis://127.0.0.1:6379/")?;
//! let exporter = MetricsExporter::new(&manager).with_label("service", "orders");
//! std::thread::spawn(move || loop {
//!     exporter.export();
//!     std::thread::sleep(Duration::from_secs(10));
//! });
//! # Ok::<(), redis_rlock::Error>(())
//! ```
//!
//! Counters (all `redis_rlock_*_total`, set with [`Counter::absolute`](::metrics::Counter::absolute)
//! to the manager's totals): `commands`, `round_trips`, `acquisitions`, `waits`,
//! `wait_microseconds` (the time waits took), `renewal_sweeps`, `renewals`, `renewal_failures`,
//! `holds_lost`, `wakeups`, `reconnects`, `local_handoffs`, `yields`, `grants_given` and
//! `grants_taken`, each as documented
//! on [`Stats`]. Gauges of the moment: `redis_rlock_renewing_holds`
//! ([`LockManager::renewing_count`]), `redis_rlock_queued_threads`
//! ([`LockManager::queued_thread_count`]), `redis_rlock_waiting_channels`
//! ([`LockManager::waiting_channel_count`]), `redis_rlock_health` ([`LockManager::health`]: 0
//! healthy, 1 suspended, 2 lost) and `redis_rlock_eviction_risk`
//! ([`LockManager::eviction_risk`]: 1 or 0).

use ::metrics::{Label, SharedString, Unit};

use crate::health::Health;
use crate::manager::LockManager;
use crate::stats::Stats;

/// Copies a manager's [`Stats`] and gauges into the `metrics` facade on each
/// [`export`](Self::export). See the [module docs](self) for the metric names.
///
/// It holds a clone of the manager, which keeps the manager's threads and connections alive
/// while the exporter lives: drop it (end the thread that exports) when the manager should
/// stop. Several managers in one process are told apart by a label
/// ([`with_label`](Self::with_label)).
#[derive(Debug, Clone)]
pub struct MetricsExporter {
    manager: LockManager,
    labels: Vec<Label>,
}

/// One counter: its name, unit, description, and value in a snapshot.
type CounterRow = (&'static str, Unit, &'static str, u64);

/// The counters of a snapshot, spelled out field by field (no `..`) so that a counter added to
/// `Stats` fails to compile here until it is exported too.
fn counters(stats: Stats) -> [CounterRow; 15] {
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
    } = stats;
    let wait_us = u64::try_from(wait_time.as_micros()).unwrap_or(u64::MAX);
    [
        (
            "redis_rlock_commands_total",
            Unit::Count,
            "Commands sent to Redis (each command of a pipeline counts).",
            commands,
        ),
        (
            "redis_rlock_round_trips_total",
            Unit::Count,
            "Round trips to Redis (a pipeline counts once).",
            round_trips,
        ),
        (
            "redis_rlock_acquisitions_total",
            Unit::Count,
            "Successful acquisitions, re-entries included.",
            acquisitions,
        ),
        (
            "redis_rlock_waits_total",
            Unit::Count,
            "Acquisitions that had to wait because the lock was held.",
            waits,
        ),
        (
            "redis_rlock_wait_microseconds_total",
            Unit::Microseconds,
            "The time acquisitions spent waiting, added up.",
            wait_us,
        ),
        (
            "redis_rlock_renewal_sweeps_total",
            Unit::Count,
            "Renewal sweeps the watchdog sent.",
            renewal_sweeps,
        ),
        (
            "redis_rlock_renewals_total",
            Unit::Count,
            "Holds renewed (one per hold per sweep).",
            renewals,
        ),
        (
            "redis_rlock_renewal_failures_total",
            Unit::Count,
            "Renewal sweeps that failed (Redis unreachable or too slow); they are retried.",
            renewal_failures,
        ),
        (
            "redis_rlock_holds_lost_total",
            Unit::Count,
            "Holds found lost: gone at a renewal, or their lease ran out unconfirmed.",
            holds_lost,
        ),
        (
            "redis_rlock_wakeups_total",
            Unit::Count,
            "Unlock messages received for locks that local threads wait for.",
            wakeups,
        ),
        (
            "redis_rlock_reconnects_total",
            Unit::Count,
            "Connections opened again after one was found dead.",
            reconnects,
        ),
        (
            "redis_rlock_local_handoffs_total",
            Unit::Count,
            "Releases that acquired the lock for the next local thread in the same call.",
            local_handoffs,
        ),
        (
            "redis_rlock_yields_total",
            Unit::Count,
            "Releases that left the lock free because other clients were waiting for it.",
            yields,
        ),
        (
            "redis_rlock_grants_given_total",
            Unit::Count,
            "Releases that granted the lock to a waiting client elsewhere in the same call.",
            grants_given,
        ),
        (
            "redis_rlock_grants_taken_total",
            Unit::Count,
            "Acquisitions granted by another client's release, taken without a request.",
            grants_taken,
        ),
    ]
}

/// One gauge: its name, description, and how to read it from a manager.
type GaugeRow = (&'static str, &'static str, fn(&LockManager) -> usize);

/// [`LockManager::health`] as a number: 0 healthy, 1 suspended, 2 lost.
fn health_level(manager: &LockManager) -> usize {
    match manager.health() {
        Health::Suspended { .. } => 1,
        Health::Lost { .. } => 2,
        _ => 0,
    }
}

fn eviction_risk(manager: &LockManager) -> usize {
    usize::from(manager.eviction_risk())
}

const GAUGES: [GaugeRow; 5] = [
    (
        "redis_rlock_renewing_holds",
        "Holds the watchdog is renewing now.",
        LockManager::renewing_count,
    ),
    (
        "redis_rlock_queued_threads",
        "Threads waiting in line behind another thread of this manager.",
        LockManager::queued_thread_count,
    ),
    (
        "redis_rlock_waiting_channels",
        "Lock channels local threads are waiting on now.",
        LockManager::waiting_channel_count,
    ),
    (
        "redis_rlock_health",
        "Whether locks are being renewed: 0 healthy, 1 suspended (renewals failing), 2 lost.",
        health_level,
    ),
    (
        "redis_rlock_eviction_risk",
        "1 when some master's eviction policy may evict lock keys (read at start).",
        eviction_risk,
    ),
];

impl MetricsExporter {
    /// An exporter for `manager` (and all its clones, which share the counters). Describes
    /// the metrics (unit and help text) to the recorder installed now, so create it after
    /// installing the recorder.
    pub fn new(manager: &LockManager) -> Self {
        for (name, unit, help, _) in counters(Stats::default()) {
            ::metrics::describe_counter!(name, unit, help);
        }
        for (name, help, _) in GAUGES {
            ::metrics::describe_gauge!(name, Unit::Count, help);
        }
        MetricsExporter {
            manager: manager.clone(),
            labels: Vec::new(),
        }
    }

    /// Adds a label to every metric this exporter sets, such as the service or the Redis
    /// deployment when one process has several managers.
    pub fn with_label(
        mut self,
        key: impl Into<SharedString>,
        value: impl Into<SharedString>,
    ) -> Self {
        self.labels.push(Label::new(key, value));
        self
    }

    /// Sets every counter to the manager's total so far and every gauge to its value now.
    /// No I/O: a snapshot of atomic counters and a few short lock-protected reads, cheap enough
    /// for every scrape.
    pub fn export(&self) {
        for (name, _, _, value) in counters(self.manager.stats()) {
            ::metrics::counter!(name, self.labels.clone()).absolute(value);
        }
        for (name, _, read) in GAUGES {
            ::metrics::gauge!(name, self.labels.clone()).set(read(&self.manager) as f64);
        }
    }
}

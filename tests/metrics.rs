//! `MetricsExporter` (feature `metrics`): what it publishes through the `metrics` facade, read
//! back with metrics-util's debugging recorder, installed for this thread only.
//!
//! Run with `cargo test --features metrics --test metrics`.
#![cfg(feature = "metrics")]

use redis_rlock_testkit as support;

use std::collections::BTreeMap;

use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use redis_rlock::metrics::MetricsExporter;
use redis_rlock::LockManager;
use support::RedisServer;

const COUNTERS: [&str; 15] = [
    "redis_rlock_acquisitions_total",
    "redis_rlock_commands_total",
    "redis_rlock_grants_given_total",
    "redis_rlock_grants_taken_total",
    "redis_rlock_holds_lost_total",
    "redis_rlock_local_handoffs_total",
    "redis_rlock_reconnects_total",
    "redis_rlock_renewal_failures_total",
    "redis_rlock_renewal_sweeps_total",
    "redis_rlock_renewals_total",
    "redis_rlock_round_trips_total",
    "redis_rlock_wait_microseconds_total",
    "redis_rlock_waits_total",
    "redis_rlock_wakeups_total",
    "redis_rlock_yields_total",
];

const GAUGES: [&str; 5] = [
    "redis_rlock_eviction_risk",
    "redis_rlock_health",
    "redis_rlock_queued_threads",
    "redis_rlock_renewing_holds",
    "redis_rlock_waiting_channels",
];

struct Metric {
    kind: MetricKind,
    labels: Vec<(String, String)>,
    unit: Option<Unit>,
    description: Option<String>,
    value: DebugValue,
}

/// What the recorder holds, by metric name.
fn published(snapshotter: &Snapshotter) -> BTreeMap<String, Metric> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, description, value)| {
            let (kind, key) = key.into_parts();
            let labels = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            let metric = Metric {
                kind,
                labels,
                unit,
                description: description.map(|d| d.to_string()),
                value,
            };
            (key.name().to_string(), metric)
        })
        .collect()
}

fn counter(metrics: &BTreeMap<String, Metric>, name: &str) -> u64 {
    match metrics.get(name).map(|m| &m.value) {
        Some(DebugValue::Counter(value)) => *value,
        other => panic!("{name} is not a published counter: {other:?}"),
    }
}

fn gauge(metrics: &BTreeMap<String, Metric>, name: &str) -> f64 {
    match metrics.get(name).map(|m| &m.value) {
        Some(DebugValue::Gauge(value)) => value.into_inner(),
        other => panic!("{name} is not a published gauge: {other:?}"),
    }
}

#[test]
fn the_exporter_publishes_every_counter_and_gauge_with_its_labels_and_descriptions() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let exporter = metrics::with_local_recorder(&recorder, || {
        MetricsExporter::new(&manager).with_label("service", "orders")
    });

    for _ in 0..3 {
        manager.lock("metrics:a").unwrap().unlock().unwrap();
    }
    let held = manager.lock("metrics:b").unwrap();
    metrics::with_local_recorder(&recorder, || exporter.export());
    let stats = manager.stats();
    let metrics = published(&snapshotter);

    let names: Vec<&str> = metrics.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = COUNTERS.iter().chain(GAUGES.iter()).copied().collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    for (name, metric) in &metrics {
        let kind = if name.ends_with("_total") {
            MetricKind::Counter
        } else {
            MetricKind::Gauge
        };
        assert_eq!(metric.kind, kind, "{name}");
        assert_eq!(
            metric.labels,
            [("service".to_string(), "orders".to_string())],
            "{name}"
        );
        assert!(
            metric.description.as_deref().is_some_and(|d| !d.is_empty()),
            "{name} has no description"
        );
    }
    assert_eq!(
        metrics["redis_rlock_wait_microseconds_total"].unit,
        Some(Unit::Microseconds)
    );

    assert_eq!(counter(&metrics, "redis_rlock_acquisitions_total"), 4);
    assert_eq!(counter(&metrics, "redis_rlock_waits_total"), 0);
    assert_eq!(counter(&metrics, "redis_rlock_holds_lost_total"), 0);
    // Three lock/unlock cycles and one lock: at least seven round trips. Snapshots taken after
    // the export can only have grown.
    let round_trips = counter(&metrics, "redis_rlock_round_trips_total");
    assert!(
        (7..=stats.round_trips).contains(&round_trips),
        "{round_trips}"
    );
    let commands = counter(&metrics, "redis_rlock_commands_total");
    assert!(
        (round_trips..=stats.commands).contains(&commands),
        "{commands}"
    );
    assert_eq!(gauge(&metrics, "redis_rlock_renewing_holds"), 1.0);
    assert_eq!(gauge(&metrics, "redis_rlock_queued_threads"), 0.0);
    assert_eq!(gauge(&metrics, "redis_rlock_health"), 0.0);
    assert_eq!(gauge(&metrics, "redis_rlock_eviction_risk"), 0.0);
    held.unlock().unwrap();
}

#[test]
fn each_export_sets_the_totals_so_far() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let exporter = metrics::with_local_recorder(&recorder, || MetricsExporter::new(&manager));

    manager.lock("metrics:c").unwrap().unlock().unwrap();
    metrics::with_local_recorder(&recorder, || exporter.export());
    let first = published(&snapshotter);
    assert_eq!(counter(&first, "redis_rlock_acquisitions_total"), 1);
    assert!(first["redis_rlock_acquisitions_total"].labels.is_empty());

    let held = manager.lock("metrics:c").unwrap();
    let reentered = manager.lock("metrics:c").unwrap();
    metrics::with_local_recorder(&recorder, || exporter.export());
    let second = published(&snapshotter);
    assert_eq!(counter(&second, "redis_rlock_acquisitions_total"), 3);
    // One hold per thread and lock, however many times it was re-entered.
    assert_eq!(gauge(&second, "redis_rlock_renewing_holds"), 1.0);
    drop(reentered);
    drop(held);

    metrics::with_local_recorder(&recorder, || exporter.export());
    let third = published(&snapshotter);
    assert_eq!(counter(&third, "redis_rlock_acquisitions_total"), 3);
    assert_eq!(gauge(&third, "redis_rlock_renewing_holds"), 0.0);
}

//! The manager-wide health (`LockManager::health`, `health_changes`) on a server frozen with
//! SIGSTOP, the eviction-policy check at build, and the start-up check's error during
//! `CLIENT PAUSE WRITE`.

use redis_rlock_testkit as support;

use std::time::Duration;

use redis_rlock::{Health, HealthChange, LockManager, PolicySource};
use support::RedisServer;

/// Far more than any step here takes, even on a loaded machine: only a bug reaches it.
const PATIENCE: Duration = Duration::from_secs(60);

fn next_change(changes: &crossbeam_channel::Receiver<HealthChange>) -> HealthChange {
    changes
        .recv_timeout(PATIENCE)
        .expect("a health change within the patience")
}

#[test]
fn renewals_failing_suspend_the_manager_before_any_lease_runs_out_and_it_heals_after() {
    let server = RedisServer::start();
    // A period of 3 s; a sweep to a frozen server fails after 1 s, leaving each lease about
    // 5 s.
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(9))
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let changes = manager.health_changes();
    let guards: Vec<_> = (0..3)
        .map(|i| manager.lock(&format!("health:held-{i}")).unwrap())
        .collect();
    assert_eq!(manager.health(), Health::Healthy);

    server.freeze();
    let suspended = next_change(&changes);
    let leases: Vec<_> = guards.iter().map(|g| g.remaining_lease()).collect();
    let health = manager.health();
    server.thaw();
    assert!(suspended.from.is_healthy(), "{suspended:?}");
    assert!(
        matches!(
            suspended.to,
            Health::Suspended {
                failed_sweeps: 1,
                ..
            }
        ),
        "{suspended:?}"
    );
    assert!(matches!(health, Health::Suspended { .. }), "{health:?}");
    for (guard, lease) in guards.iter().zip(&leases) {
        assert!(
            !guard.is_lost(),
            "a lease ran out before Suspended was told"
        );
        assert!(lease.is_some_and(|left| left > Duration::ZERO), "{lease:?}");
    }
    println!("suspended, leases left: {leases:?}");

    let healed = next_change(&changes);
    assert!(
        matches!(healed.from, Health::Suspended { .. }),
        "{healed:?}"
    );
    assert!(healed.to.is_healthy(), "{healed:?}");
    assert_eq!(healed.missed, 0);
    assert!(manager.health().is_healthy());
    assert!(guards.iter().all(|g| !g.is_lost()), "no hold was lost");
    assert!(changes.try_recv().is_err(), "two changes, no more");
    for guard in guards {
        guard.unlock().unwrap();
    }
}

#[test]
fn leases_that_ran_out_while_frozen_make_it_lost_until_a_later_sweep_answers() {
    let server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let changes = manager.health_changes();
    let guards: Vec<_> = (0..2)
        .map(|i| manager.lock(&format!("health:lost-{i}")).unwrap())
        .collect();
    let lost_signals: Vec<_> = guards.iter().map(|g| g.lost_signal()).collect();
    server.freeze();
    let mut seen = vec![next_change(&changes)];
    while !matches!(seen.last().unwrap().to, Health::Lost { .. }) {
        seen.push(next_change(&changes));
    }
    server.thaw();
    for signal in &lost_signals {
        signal
            .recv_timeout(PATIENCE)
            .expect("each guard is told too");
    }
    assert!(
        matches!(seen[0].to, Health::Suspended { .. }),
        "suspended before lost: {seen:?}"
    );
    // Nothing held is renewed: it stays Lost until a sweep answers for a hold.
    assert!(matches!(manager.health(), Health::Lost { .. }));
    let again = manager.lock("health:after").unwrap();
    let healed = next_change(&changes);
    assert!(matches!(healed.from, Health::Lost { .. }), "{healed:?}");
    assert!(healed.to.is_healthy(), "{healed:?}");
    assert!(!again.is_lost());
    again.unlock().unwrap();
    drop(guards);
}

#[test]
fn a_wait_for_a_health_change_returns_with_it_or_at_its_timeout() {
    let server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(3))
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let seen = manager.health();
    let quiet = manager.wait_health_change(&seen, Duration::from_millis(50));
    assert!(quiet.is_healthy());
    let guard = manager.lock("health:wait").unwrap();
    server.freeze();
    let changed = manager.wait_health_change(&seen, PATIENCE);
    server.thaw();
    assert!(matches!(changed, Health::Suspended { .. }), "{changed:?}");
    let healed = manager.wait_health_change(&changed, PATIENCE);
    assert!(healed.is_healthy(), "{healed:?}");
    guard.unlock().unwrap();
}

#[test]
fn a_policy_that_evicts_keys_with_a_ttl_is_reported_at_build() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]);
    let manager = LockManager::new(&server.url()).unwrap();
    let policies = manager.eviction_policies();
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0].policy.as_deref(), Some("volatile-lru"));
    assert_eq!(policies[0].maxmemory, Some(100 * 1024 * 1024));
    assert_eq!(policies[0].source, PolicySource::Config);
    assert!(manager.eviction_risk());
}

#[test]
fn the_default_policy_evicts_nothing() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let policies = manager.eviction_policies();
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0].policy.as_deref(), Some("noeviction"));
    assert!(!manager.eviction_risk());
}

#[test]
fn where_config_is_refused_the_policy_is_read_from_info() {
    let server = RedisServer::start_with(&[
        "--maxmemory",
        "100mb",
        "--maxmemory-policy",
        "allkeys-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let manager = LockManager::new(&server.url()).unwrap();
    let policies = manager.eviction_policies();
    assert_eq!(policies[0].source, PolicySource::InfoMemory, "{policies:?}");
    assert_eq!(policies[0].policy.as_deref(), Some("allkeys-lru"));
    assert!(manager.eviction_risk());
}

#[test]
fn a_build_during_client_pause_write_says_what_did_not_answer() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5000)
        .arg("WRITE")
        .query(&mut conn)
        .unwrap();
    let built = LockManager::builder(&server.url())
        .response_timeout(Duration::from_millis(500))
        .build();
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut conn)
        .unwrap();
    let err = built.expect_err("writes are paused for 5 s");
    let message = err.to_string();
    println!("{message}");
    assert!(err.is_timeout(), "{message}");
    for part in [
        "starting the manager",
        "PUBLISH",
        "CLIENT PAUSE",
        &server.port().to_string(),
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
}

#[test]
fn where_neither_config_nor_info_answers_the_policy_is_unknown_and_the_build_goes_on() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]);
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-config", "-info",
        ])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}/", server.port());
    let manager = LockManager::new(&url).unwrap();
    let policies = manager.eviction_policies();
    assert_eq!(policies[0].source, PolicySource::Unknown, "{policies:?}");
    assert_eq!(policies[0].policy, None);
    assert!(!manager.eviction_risk(), "unknown is no risk reported");
    manager
        .lock("health:unknown-policy")
        .unwrap()
        .unlock()
        .unwrap();
}

#[test]
fn a_cluster_reports_every_masters_policy() {
    let cluster = support::cluster::RedisCluster::start();
    let manager = LockManager::new(&cluster.url()).unwrap();
    let policies = manager.eviction_policies();
    let mut servers: Vec<u16> = policies
        .iter()
        .map(|p| p.server.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    servers.sort();
    let mut masters = cluster.master_ports();
    masters.sort();
    assert_eq!(servers, masters, "{policies:?}");
    assert!(policies.iter().all(|p| p.source == PolicySource::Config));
    assert!(!manager.eviction_risk());
}

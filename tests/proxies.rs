//! Proxies and managed services in front of Redis (issue 22), played by the fault proxy of
//! testkit/src/proxy.rs: endpoints that refuse `HELLO` (RESP3), cluster proxies that refuse
//! a script call whose keys span slots (CROSSSLOT), managed services that answer "non local
//! key" under load or know no `WAIT`.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis_rlock::{LockManager, PubSubProtocol};
use support::cluster::RedisCluster;
use support::proxy::Proxy;
use support::RedisServer;

/// What Redis 5 and Envoy answer to `HELLO`.
const NO_HELLO: &str = "ERR unknown command 'HELLO', with args beginning with: '3'";

/// Waits (10 s at most) until `channel` has a subscriber on the server speaking RESP2 (Redis
/// 7's `CLIENT LIST` shows each client's protocol).
fn resp2_subscriber_on(conn: &mut redis::Connection) -> bool {
    support::eventually(Duration::from_secs(10), || {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(conn)
            .expect("CLIENT LIST");
        clients
            .lines()
            .any(|client| client.contains(" resp=2") && !client.contains(" sub=0 "))
    })
}

/// A waiter behind an endpoint that refuses `HELLO 3` is woken by the holder's release
/// through its RESP2 listener (not by its holder's 30 s lease), also after the listener sat
/// idle through several read ticks (each of which redis-rs counts as a reply owed).
#[test]
fn a_waiter_behind_an_endpoint_without_resp3_is_woken_over_resp2() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.refuse("HELLO", NO_HELLO);
    let waiting = LockManager::new(&proxy.url()).expect("a manager without RESP3");
    assert!(proxy.refused() >= 1, "HELLO 3 was asked for, and refused");
    let holding = LockManager::new(&server.url()).expect("the holder's manager");
    let guard = holding.lock("resp2:woken").expect("lock");

    let waiter = support::Waiter::spawn(&waiting, "resp2:woken");
    let mut conn = server.conn();
    assert!(
        support::await_subscribers(&mut conn, "redisson_lock__channel:{resp2:woken}", 1),
        "the waiter subscribed"
    );
    assert!(resp2_subscriber_on(&mut conn), "the listener speaks RESP2");
    // The scenario itself, not an ordering: the listener's reads time out (500 ms ticks)
    // while nothing is published, and the release must still be heard after that.
    std::thread::sleep(Duration::from_millis(1600));
    assert!(waiter.is_waiting());
    let wakeups = waiting.stats().wakeups;
    guard.unlock().expect("unlock");
    let released = Instant::now();
    let waited = waiter.acquired_since(released);
    assert!(
        waited < Duration::from_secs(5),
        "woken by the release, not by the 30 s lease: {waited:?}"
    );
    assert!(
        waiting.stats().wakeups > wakeups,
        "the release was heard as a message: {:?}",
        waiting.stats()
    );
}

/// `PubSubProtocol::Resp3` on an endpoint that refuses `HELLO 3` fails `build` with a
/// connection error that names the cause and the way out; `Resp2` works without asking.
#[test]
fn resp3_insisted_on_fails_build_clearly_and_resp2_never_asks() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.refuse("HELLO", NO_HELLO);
    let err = LockManager::builder(&proxy.url())
        .pubsub_protocol(PubSubProtocol::Resp3)
        .build()
        .unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("HELLO 3") && message.contains("PubSubProtocol::Auto"),
        "{message}"
    );

    let refused = proxy.refused();
    let manager = LockManager::builder(&proxy.url())
        .pubsub_protocol(PubSubProtocol::Resp2)
        .build()
        .expect("a RESP2 manager");
    let guard = manager.lock("resp2:forced").expect("lock");
    guard.unlock().expect("unlock");
    assert!(resp2_subscriber_on(&mut server.conn()));
    assert_eq!(proxy.refused(), refused, "RESP2 never sent HELLO");
}

/// On a Redis 7 cluster, where releases are announced with `SPUBLISH`, a RESP2 listener
/// hears the `smessage` pushes (which redis-rs' RESP2 `PubSub` drops) on every master.
#[test]
fn a_resp2_listener_hears_sharded_releases_on_a_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let holder = LockManager::cluster_builder(&seeds)
        .build()
        .expect("holder");
    let waiter = LockManager::cluster_builder(&seeds)
        .pubsub_protocol(PubSubProtocol::Resp2)
        .build()
        .expect("a RESP2 waiter");
    let names: Vec<String> = cluster
        .master_ports()
        .into_iter()
        .map(|master| {
            (0..10_000)
                .map(|i| format!("resp2-sharded-{i}"))
                .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
                .expect("a name on that master")
        })
        .collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| holder.lock(n).expect("lock"))
        .collect();
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = names
        .iter()
        .map(|name| {
            let (waiter, name, tx) = (waiter.clone(), name.clone(), tx.clone());
            std::thread::spawn(move || {
                let got = waiter.try_lock(&name, Duration::from_secs(25));
                tx.send(Instant::now()).expect("report");
                got.expect("try_lock")
                    .expect("acquired")
                    .unlock()
                    .expect("unlock");
            })
        })
        .collect();
    for (name, master) in names.iter().zip(cluster.master_ports()) {
        let mut conn = support::connect(&format!("redis://127.0.0.1:{master}/")).unwrap();
        let channel = format!("redisson_lock__channel:{{{name}}}");
        assert!(
            support::eventually(Duration::from_secs(10), || {
                let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(&channel)
                    .query(&mut conn)
                    .expect("SHARDNUMSUB");
                counts.first().is_some_and(|(_, n)| *n == 1)
            }),
            "the waiter of {name} subscribed on {master}"
        );
    }
    // Leases are 30 s: a waiter in within 5 s of the releases heard one.
    for guard in guards {
        guard.unlock().expect("unlock");
    }
    let released = Instant::now();
    for _ in 0..3 {
        let at = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a waiter got in");
        let waited = at.saturating_duration_since(released);
        assert!(
            waited < Duration::from_secs(5),
            "not woken by SPUBLISH: {waited:?}"
        );
    }
    for thread in threads {
        thread.join().expect("waiter");
    }
    assert!(waiter.stats().wakeups >= 3, "{:?}", waiter.stats());
}

/// Holds of names in different slots, renewed through a cluster proxy that refuses a script
/// call whose keys span slots: the first sweep's call is refused and sent again cut by slot,
/// and later sweeps cut it so from the start (one refusal in all); no hold is lost.
#[test]
fn renewals_refused_across_slots_are_cut_by_slot_and_stay_cut() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.refuse_cross_slot();
    let manager = LockManager::builder(&proxy.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .build()
        .expect("manager through the proxy");
    let names = ["crossslot:a", "crossslot:b", "crossslot:c"];
    let slots: std::collections::HashSet<u16> =
        names.iter().map(|n| RedisCluster::slot_of(n)).collect();
    assert_eq!(slots.len(), 3, "the names are in different slots");
    let guards: Vec<_> = names
        .iter()
        .map(|n| manager.lock(n).expect("lock"))
        .collect();
    assert_eq!(proxy.refused(), 0, "acquires keep to one slot");
    let sweeps = manager.stats().renewal_sweeps;
    let started = Instant::now();
    // Renewals every 500 ms of a 1.5 s lease: eight sweeps, and twice the lease, are more
    // than a hold that is not renewed lives.
    assert!(support::eventually(Duration::from_secs(30), || {
        manager.stats().renewal_sweeps >= sweeps + 8 && started.elapsed() > Duration::from_secs(3)
    }));
    for guard in &guards {
        assert!(!guard.is_lost(), "a hold was lost: {:?}", manager.stats());
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg(names[0])
        .query(&mut server.conn())
        .expect("PTTL");
    assert!(ttl > 0, "the lock is still on the server: {ttl}");
    assert_eq!(
        proxy.refused(),
        1,
        "only the first sweep's call was refused"
    );
    assert_eq!(manager.stats().renewal_failures, 0, "{:?}", manager.stats());
    for guard in guards {
        guard.unlock().expect("unlock");
    }
}

/// What ElastiCache Serverless answers under load (Redisson #5586, #6718).
const NOT_LOCAL: &str = "ERR Script attempted to access a non local key in a cluster node script";

/// A script call answered "non local key" is asked again, as after a redirection: an
/// acquire refused twice takes its lock at the third send, once; a renewal refused once is
/// sent again in the same sweep.
#[test]
fn calls_answered_non_local_key_are_asked_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = LockManager::builder(&proxy.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .build()
        .expect("manager through the proxy");
    proxy.refuse_next("EVALSHA", b"nonlocal:lock", NOT_LOCAL, 2);
    let guard = manager
        .lock("nonlocal:lock")
        .expect("acquired at the third send");
    assert_eq!(proxy.refused(), 2);
    assert_eq!(
        guard.lock().hold_count().expect("hold count"),
        1,
        "one hold"
    );

    let failures = manager.stats().renewal_failures;
    let sweeps = manager.stats().renewal_sweeps;
    proxy.refuse_next("EVALSHA", b"nonlocal:lock", NOT_LOCAL, 1);
    assert!(support::eventually(Duration::from_secs(20), || {
        proxy.refused() == 3 && manager.stats().renewal_sweeps > sweeps
    }));
    assert!(support::eventually(Duration::from_secs(20), || {
        manager.stats().renewal_sweeps > sweeps + 2
    }));
    assert_eq!(
        manager.stats().renewal_failures,
        failures,
        "{:?}",
        manager.stats()
    );
    assert!(!guard.is_lost());
    guard.unlock().expect("unlock");
    assert!(!manager
        .get_lock("nonlocal:lock")
        .is_locked()
        .expect("is_locked"));
}

/// With replica sync on (the default), a server with a replica that does not know `WAIT`
/// (a managed service, a proxy) does not fail acquires: the first refusal turns replica
/// sync off for that server (documented), and `WAIT` is not sent there again.
#[test]
fn a_server_without_wait_gets_no_replica_sync_and_no_failed_acquires() {
    let (master, _replica) = support::master_with_replica();
    let proxy = Proxy::start(master.port());
    proxy.refuse(
        "WAIT",
        "ERR unknown command 'WAIT', with args beginning with: '1' '1000' ",
    );
    let manager = LockManager::new(&proxy.url()).expect("manager through the proxy");
    let guard = manager.lock("nowait:first").expect("the acquire stands");
    assert_eq!(proxy.refused(), 1, "WAIT was tried once");
    let exists: bool = redis::cmd("EXISTS")
        .arg("nowait:first")
        .query(&mut master.conn())
        .expect("EXISTS");
    assert!(exists, "the hold was not rolled back");
    guard.unlock().expect("unlock");
    let again = manager.lock("nowait:second").expect("lock");
    again.unlock().expect("unlock");
    assert_eq!(proxy.refused(), 1, "WAIT was not sent again");
}

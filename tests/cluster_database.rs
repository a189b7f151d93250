//! A cluster's numbered databases (Redisson 4.0's `database` for Valkey Cluster): the
//! builder's `database` and the `redis-cluster://…/db` URL put every lock in that database on
//! a cluster that has them (Valkey 9.0+ with `cluster-databases`), and fail the build on one
//! that has not, rather than use database 0. Run on Valkey 9.1 with
//! `REDIS_RLOCK_SERVER=<scripts/ensure-servers --print-dir>/valkey-9.1/valkey-server`; the
//! first test is skipped on servers without numbered databases in cluster mode. The setting on
//! a single server, last.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{Error, LockManager};
use support::cluster::RedisCluster;

const DATABASE: u32 = 3;

fn seeds(cluster: &RedisCluster) -> Vec<String> {
    cluster.seed_urls()
}

fn builder_on(cluster: &RedisCluster) -> redis_rlock::LockManagerBuilder {
    let seeds = seeds(cluster);
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    LockManager::cluster_builder(&seeds)
}

/// A connection to `port` that selects `db`.
fn node(port: u16, db: u32) -> redis::Connection {
    support::connect(&format!("redis://127.0.0.1:{port}/{db}")).expect("a node's connection")
}

/// Where `name` lives: whether its slot's master has it in `db`.
fn exists_in(cluster: &RedisCluster, name: &str, db: u32) -> bool {
    let master = cluster.master_for_slot(RedisCluster::slot_of(name));
    node(master, db).exists(name).expect("EXISTS")
}

#[test]
fn locks_live_in_the_cluster_database_where_valkey_has_numbered_databases() {
    let version = support::server_version();
    if !(version.valkey && version.major >= 9) {
        support::skip(
            "locks_live_in_the_cluster_database_where_valkey_has_numbered_databases",
            "has no numbered databases in cluster mode (Valkey 9.0+ has)",
        );
        return;
    }
    let cluster = RedisCluster::start_with(&["--cluster-databases", "16"]);
    let by_setting = builder_on(&cluster)
        .database(DATABASE)
        .build()
        .expect("a manager on database 3");
    let by_url = LockManager::new(&format!("{}/{DATABASE}", cluster.url()))
        .expect("a manager on the URL's database 3");
    let on_zero = builder_on(&cluster)
        .build()
        .expect("a manager on database 0");

    for (i, master) in cluster.master_ports().into_iter().enumerate() {
        let name = (0..10_000)
            .map(|n| format!("db-lock-{i}-{n}"))
            .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
            .expect("a name on that master");
        let guard = by_setting.lock(&name).expect("lock");
        assert!(exists_in(&cluster, &name, DATABASE), "{name} in database 3");
        assert!(!exists_in(&cluster, &name, 0), "{name} not in database 0");
        assert!(by_url.get_lock(&name).is_locked().expect("is_locked"));
        assert!(
            !on_zero.get_lock(&name).is_locked().expect("is_locked"),
            "database 0 has another lock of that name"
        );

        // A waiter in the same database is woken by the release's message.
        let waiting = support::Waiter::spawn(&by_url, &name);
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let mut conn = node(master, 0);
        assert!(
            support::eventually(Duration::from_secs(10), || {
                let counts: (String, i64) = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(&channel)
                    .query(&mut conn)
                    .expect("PUBSUB SHARDNUMSUB");
                counts.1 == 1
            }),
            "the waiter subscribed"
        );
        let released = Instant::now();
        guard.unlock().expect("unlock");
        let took = waiting.acquired_since(released);
        assert!(
            took < Duration::from_secs(3),
            "woken by the message: {took:?}"
        );
    }
}

#[test]
fn a_cluster_database_the_cluster_does_not_have_fails_the_build() {
    // Without `cluster-databases`: Redis refuses SELECT in cluster mode, Valkey 9 has only 0.
    let cluster = RedisCluster::start();
    let errors = [
        builder_on(&cluster).database(DATABASE).build().map(drop),
        LockManager::new(&format!("{}/{DATABASE}", cluster.url())).map(drop),
    ];
    for err in errors {
        let err = err.expect_err("database 3 on a cluster without it");
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "a clear error, not a connect failure: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("cluster database"), "{text}");
        assert!(text.contains("cluster-databases"), "{text}");
    }
    builder_on(&cluster)
        .database(0)
        .build()
        .expect("database 0 is every cluster's");
}

#[test]
fn the_setting_takes_the_place_of_a_single_servers_url_database() {
    let server = support::RedisServer::start();
    let manager = LockManager::builder(&format!("{}1", server.url()))
        .database(2)
        .build()
        .expect("a manager on database 2");
    let _guard = manager.lock("db-lock").expect("lock");
    let in_two: bool = node(server.port(), 2).exists("db-lock").expect("EXISTS");
    let in_one: bool = node(server.port(), 1).exists("db-lock").expect("EXISTS");
    assert!(in_two && !in_one, "in database 2, not the URL's 1");
}

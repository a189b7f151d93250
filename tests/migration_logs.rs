//! What an ordinary slot migration logs (issue 23, item 5): a waiter whose lock's slot moves to
//! another master while it waits is subscribed again there and acquires; nothing of that is
//! an error, so nothing is logged at ERROR. (A subscription Redis really refuses still is:
//! tests/acl_revoked.rs.) A test binary of its own: the logger is the process's.

use redis_rlock_testkit as support;

use std::sync::Mutex;
use std::time::Duration;

use redis_rlock::LockManager;
use support::cluster::RedisCluster;

struct Recorder(Mutex<Vec<String>>);

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Error
    }
    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap().push(format!("{}", record.args()));
        }
    }
    fn flush(&self) {}
}

static ERRORS: Recorder = Recorder(Mutex::new(Vec::new()));

/// Invariant: a waiter rides through its slot's migration to another master, is woken by
/// the release there, and nothing is logged at ERROR. Before, the unconfirmed subscription at
/// the old master was logged as "Redis refused the subscription ..." at ERROR.
#[test]
fn a_slot_migration_under_a_waiter_logs_no_error() {
    log::set_logger(&ERRORS).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Error);
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = |lease| {
        LockManager::cluster_builder(&seeds)
            .watchdog_timeout(lease)
            .build()
            .expect("a manager on the cluster")
    };
    let (holder, waiter) = (
        manager(Duration::from_secs(20)),
        manager(Duration::from_secs(20)),
    );
    let name = "migrating";
    let slot = RedisCluster::slot_of(name);
    let from = cluster.master_for_slot(slot);
    let to = *cluster
        .master_ports()
        .iter()
        .find(|&&m| m != from)
        .expect("another master");
    let held = holder.lock(name).expect("lock");
    let waiting = {
        let waiter = waiter.clone();
        std::thread::spawn(move || {
            waiter
                .try_lock(name, Duration::from_secs(30))
                .map(|g| g.map(|g| g.unlock()))
        })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        waiter.waiting_channel_count() == 1
    }));
    cluster.begin_reshard(slot, to);
    cluster.finish_reshard(slot, to);
    // The waiter's listener finds the slot's new master (within a response timeout or two)
    // before the release, so that it is woken by it and not by the 20 s lease.
    std::thread::sleep(Duration::from_secs(8));
    held.unlock().expect("unlock at the new master");
    waiting
        .join()
        .expect("waiter")
        .expect("try_lock")
        .expect("acquired")
        .expect("unlock");
    let errors = ERRORS.0.lock().unwrap().clone();
    assert!(errors.is_empty(), "logged at ERROR: {errors:?}");
}

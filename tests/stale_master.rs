//! A master stopped (SIGSTOP) past its failover and then continued: a stale master. Until the
//! sentinels demote it, seconds later, it answers writes as a master, its one replica gone
//! (promoted in its place); at the demotion what it took meanwhile is dropped. With replica
//! sync on (the default), a fencing token it hands out in that window must not count: the
//! promoted master would hand out the same token again.
//!
//! The manager first counts the master's replicas while it has none (a replica promoted while
//! its master was stopped starts so, in a deployment with one replica), and the replica comes
//! only afterwards, as the old master does when the sentinels make it a replica.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::LockManager;
use support::sentinel::{replication_says, RedisSentinel};

const NAME: &str = "stale-master";
const COUNTER: &str = "redisson_lock_token:{stale-master}";

/// Takes the lock fenced and releases it; returns its token. Acquires refused because no
/// replica (or sentinel) vouched for them are tried again: that is how the stale master is
/// refused.
fn token(manager: &LockManager) -> u64 {
    let lock = manager.get_lock(NAME);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match lock.try_lock_fenced(Duration::from_secs(5)) {
            Ok(Some(guard)) => {
                let token = guard.fencing_token().expect("a fenced hold has a token");
                guard.unlock().expect("unlock");
                return token;
            }
            Ok(None) => panic!("nobody else holds the lock, yet the wait ran out"),
            Err(err) => assert!(
                Instant::now() < deadline,
                "no fenced acquire within 30 s; last error: {err}"
            ),
        }
    }
}

fn counter_on(port: u16) -> u64 {
    let mut conn = support::connect(&format!("redis://127.0.0.1:{port}/")).expect("connect");
    let counter: Option<u64> =
        support::query(&mut conn, redis::cmd("GET").arg(COUNTER)).expect("GET the counter");
    counter.unwrap_or(0)
}

#[test]
fn a_master_continued_after_its_failover_hands_out_no_fencing_token_twice() {
    let sentinel = RedisSentinel::with_replicas(0);
    let manager = sentinel.manager();
    // The manager counted no replica; one comes now.
    let replica = sentinel.add_replica();
    let before = token(&manager);
    assert_eq!(
        counter_on(replica),
        before,
        "the replica has the token the master handed out"
    );
    sentinel.wait_until_sentinels_know(replica);

    let old = sentinel.master_port();
    sentinel.pause(old);
    let promoted = sentinel.wait_for_failover(old);
    assert_eq!(promoted, replica);
    sentinel.resume(old);
    // The sentinels demote the old master only seconds after it answers again; meanwhile it
    // takes writes as a master without replicas.
    let after = token(&manager);
    let issued_by_promoted = counter_on(promoted);
    let still_stale = replication_says(old, "role:master");
    assert!(
        after <= issued_by_promoted,
        "token {after} came from the stale master (old master still a master: {still_stale}); \
         the promoted master, whose counter is at {issued_by_promoted}, hands it out again"
    );
    assert!(after > before, "tokens went back: {before} then {after}");

    sentinel.wait_for_demotion(old);
    let last = token(&manager);
    assert!(
        last > after,
        "token {last} after the demotion is not above {after}"
    );
}

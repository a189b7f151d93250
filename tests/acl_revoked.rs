//! Channel rights revoked while a manager runs (they are checked only when it starts): the
//! pub/sub listener sees its subscriptions refused, logs it, and leaves its waiters to retry
//! by the holder's TTL instead of waiting for a wake-up that cannot come.

use redis_rlock_testkit as support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_rlock::{LockManager, Result};
use support::RedisServer;

struct Recorder(Mutex<Vec<String>>);

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        self.0.lock().unwrap().push(format!("{}", record.args()));
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));

#[test]
fn a_refused_subscription_is_logged_and_waiters_fall_back_to_the_ttl() -> Result<()> {
    log::set_logger(&RECORDER).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Warn);
    let server = RedisServer::start();
    let mut conn = server.conn();
    server.acl(&[
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "~*",
        "+@all",
        "allchannels",
    ]);
    let url = format!("redis://locker:pw@127.0.0.1:{}/", server.port());
    let waiter_manager = LockManager::builder(&url)
        .response_timeout(Duration::from_millis(500))
        .build()?;
    support::await_listener(&mut conn, &waiter_manager);

    // Revoke the channel rights: Redis drops the listener's connection, which was subscribed
    // to a channel no longer allowed, and the listener's new subscriptions are refused.
    server.acl(&["SETUSER", "locker", "resetchannels"]);
    let control = format!("redis_rlock__control:{{{}}}", waiter_manager.client_id());
    assert_eq!(
        support::numsub(&mut conn, &control),
        0,
        "the listener was dropped"
    );

    let holder = LockManager::new(&server.url())?;
    let lease = Duration::from_millis(1_500);
    let held = holder.lock_with_lease("acl:revoked", lease)?;
    let started = Instant::now();
    let got = waiter_manager.try_lock("acl:revoked", Duration::from_secs(20))?;
    let waited = started.elapsed();
    let guard = got.expect("acquired once the holder's lease ran out");
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    assert!(held.is_lost() || held.remaining_lease().is_none());

    let logged = RECORDER.0.lock().unwrap().clone();
    assert!(
        logged
            .iter()
            .any(|text| text.contains("refused the subscription")
                && text.contains("redisson_lock__channel:{acl:revoked}")),
        "the refusal was logged: {logged:#?}"
    );
    assert_eq!(
        support::numsub(&mut conn, "redisson_lock__channel:{acl:revoked}"),
        0
    );
    // With the rights back, the release (whose PUBLISH needs them) goes through.
    server.acl(&["SETUSER", "locker", "allchannels"]);
    guard.unlock()?;
    Ok(())
}

/// The check above must not mistake RESP3, where PING answers `PONG` on a subscribed
/// connection too, for a refusal: a RESP3 waiter is still woken by the release's message
/// rather than after an unconfirmed subscription's response timeout (10 s here).
#[test]
fn a_resp3_waiter_is_still_woken_by_the_release() -> Result<()> {
    let server = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}/?protocol=resp3", server.port());
    let holder = LockManager::new(&url)?;
    let waiting = LockManager::builder(&url)
        .response_timeout(Duration::from_secs(10))
        .build()?;
    let mut conn = server.conn();
    for round in 0..2 {
        // The second round runs after the listener learnt that its PING cannot tell.
        let name = format!("resp3:{round}");
        let held = holder.lock(&name)?;
        let waiter = support::Waiter::spawn(&waiting, &name);
        let channel = format!("redisson_lock__channel:{{{name}}}");
        assert!(support::await_subscribers(&mut conn, &channel, 1));
        let released = Instant::now();
        held.unlock()?;
        let after = waiter.acquired_since(released);
        assert!(after < Duration::from_secs(5), "round {round}: {after:?}");
    }
    Ok(())
}

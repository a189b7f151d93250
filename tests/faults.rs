//! Faults injected on purpose, each test naming the invariant it checks. Real redis-server
//! processes on loopback; every wait bounded.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::RedisServer;

/// Invariant: when Redis restarts empty, holders are told their locks are lost within one
/// renewal period (plus reconnect slack), waiters reconnect and acquire, and the old holders'
/// unlocks fail without touching the new owner.
#[test]
fn a_restart_tells_holders_their_locks_are_lost_and_lets_waiters_in() -> Result<()> {
    let mut server = RedisServer::start();
    let timeout = Duration::from_millis(900); // renewal period 300 ms
    let holder = LockManager::builder(&server.url())
        .watchdog_timeout(timeout)
        .response_timeout(Duration::from_millis(500))
        .build()?;
    let waiter = LockManager::new(&server.url())?;
    let held: Vec<_> = ["fault:a", "fault:b"]
        .iter()
        .map(|name| holder.lock(name))
        .collect::<Result<_>>()?;
    let signals: Vec<_> = held.iter().map(|g| g.lost_signal()).collect();
    let waiting = support::Waiter::spawn(&waiter, "fault:a");
    let mut conn = server.conn();
    assert!(support::await_subscribers(
        &mut conn,
        "redisson_lock__channel:{fault:a}",
        1
    ));
    drop(conn);

    server.restart();
    let restarted = Instant::now();
    for signal in &signals {
        signal
            .recv_timeout(Duration::from_secs(10))
            .expect("the holder is told");
    }
    let told = restarted.elapsed();
    assert!(
        told < timeout / 3 + Duration::from_secs(2),
        "told after {told:?}"
    );
    let took = waiting.acquired_since(restarted);
    assert!(took < Duration::from_secs(10), "waiter took {took:?}");
    for guard in held {
        assert!(guard.is_lost());
        assert!(guard.unlock().unwrap_err().is_not_held());
    }
    Ok(())
}

/// Invariant: with the server paused, `try_lock(wait)` returns within the wait plus one
/// response timeout (an error or no lock, never a hang).
#[test]
fn a_paused_server_bounds_try_lock_by_the_wait_plus_one_response_timeout() -> Result<()> {
    let server = RedisServer::start();
    let response_timeout = Duration::from_millis(500);
    let manager = LockManager::builder(&server.url())
        .response_timeout(response_timeout)
        .build()?;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3_000)
        .arg("ALL")
        .query(&mut server.conn())
        .unwrap();
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let result = manager.try_lock("fault:paused", wait);
    let took = started.elapsed();
    match result {
        Ok(guard) => assert!(guard.is_none(), "no lock while paused"),
        Err(err) => assert!(err.is_timeout(), "{err}"),
    }
    // The bound, plus slack for a loaded machine.
    assert!(
        took < wait + response_timeout + Duration::from_millis(700),
        "took {took:?}"
    );
    Ok(())
}

/// Invariant: a panic inside a critical section releases the lock (the guard's drop runs
/// during unwinding).
#[test]
fn a_panic_inside_the_critical_section_releases_the_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let worker = {
        let manager = manager.clone();
        thread::spawn(move || {
            let _guard = manager.lock("fault:panic").expect("lock");
            panic!("the critical section fails");
        })
    };
    assert!(worker.join().is_err(), "the worker panicked");
    assert!(!manager.get_lock("fault:panic").is_locked()?);
    assert!(manager.try_lock("fault:panic", Duration::ZERO)?.is_some());
    Ok(())
}

/// Invariant: names are data, never code: quotes, braces, spaces, newlines, Lua and binary
/// lookalikes work and land on exactly the key of that name; a 1 MiB name is refused with a
/// clear error before anything is sent.
#[test]
fn lock_names_are_data() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let names = [
        "with \"quotes\" and 'single'",
        "{tagged}:and more {braces}",
        "spaces and\nnewlines\r\ttabs",
        "]]; redis.call('flushall') --",
        "'); return redis.call('del', KEYS[1]) --",
        "ünïcödé 🔒 名前",
        "\u{0}nul inside",
    ];
    let _: () = conn.set("fault:canary", "still here").unwrap();
    for name in names {
        let guard = manager.lock(name)?;
        let exists: bool = conn.exists(name).unwrap();
        assert!(exists, "{name:?} is the key");
        assert_eq!(manager.get_lock(name).hold_count()?, 1);
        guard.unlock()?;
        assert!(!manager.get_lock(name).is_locked()?, "{name:?}");
    }
    let canary: String = conn.get("fault:canary").unwrap();
    assert_eq!(canary, "still here", "no name ran as code");

    let huge = "x".repeat(1024 * 1024);
    let err = manager.lock(&huge).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("bytes"), "{err}");
    assert!(
        err.to_string().len() < 500,
        "the message does not repeat the name"
    );
    Ok(())
}

/// Every log record of this test process, for checking what the crate logs.
struct Recorder(std::sync::Mutex<Vec<String>>);

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        self.0.lock().unwrap().push(format!("{}", record.args()));
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(std::sync::Mutex::new(Vec::new()));

/// Invariant: passwords appear in no `Debug` or `Display` output, of managers, builders or
/// errors, and in no log record.
#[test]
fn passwords_never_appear_in_output() -> Result<()> {
    log::set_logger(&RECORDER).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Trace);
    let server = RedisServer::start_with(&["--requirepass", "right-s3cret"]);
    let port = server.port();
    let good = format!("redis://:right-s3cret@127.0.0.1:{port}/");
    let bad = format!("redis://:wrong-hunter2@127.0.0.1:{port}/");
    let manager = LockManager::new(&good)?;
    let err = LockManager::new(&bad).unwrap_err();
    let texts = [
        format!("{manager:?}"),
        format!("{:?}", LockManager::builder(&good)),
        format!("{:?}", LockManager::builder(&bad)),
        format!("{err}"),
        format!("{err:?}"),
    ];
    // Work that logs: a guard dropped after its lock was deleted, a restart of the listener's
    // connection.
    let guard = manager.lock("fault:logged")?;
    let _: () = redis::cmd("DEL")
        .arg("fault:logged")
        .query(&mut server.conn())
        .unwrap();
    drop(guard);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut server.conn())
        .unwrap();
    manager.lock("fault:logged")?.unlock()?;
    let logged = RECORDER.0.lock().unwrap().clone();
    assert!(!logged.is_empty(), "the check saw log records");
    for text in texts.iter().chain(&logged) {
        assert!(!text.contains("right-s3cret"), "{text}");
        assert!(!text.contains("wrong-hunter2"), "{text}");
    }
    assert!(err.is_connection_error(), "{err}");
    Ok(())
}

/// Invariant: ACL users (`redis://user:password@host`) work, and a wrong password for them
/// is a connection error.
#[test]
fn an_acl_user_can_lock() -> Result<()> {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">locker-pw", "~*", "&*", "+@all"][..])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://locker:locker-pw@127.0.0.1:{}/", server.port());
    let manager = LockManager::new(&url)?;
    manager.lock("fault:acl")?.unlock()?;
    let wrong = format!("redis://locker:nope@127.0.0.1:{}/", server.port());
    let err = LockManager::new(&wrong).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    Ok(())
}

/// Creates the ACL user `name` (password `pw`) with all keys, all commands, and `rules`.
fn acl_user(server: &RedisServer, name: &str, rules: &[&str]) -> String {
    let mut args = vec!["SETUSER", name, "reset", "on", ">pw", "~*", "+@all"];
    args.extend_from_slice(rules);
    let _: () = redis::cmd("ACL")
        .arg(&args[..])
        .query(&mut server.conn())
        .unwrap();
    format!("redis://{name}:pw@127.0.0.1:{}/", server.port())
}

/// Invariant: a user without the right to PUBLISH or SUBSCRIBE on the channels of every kind
/// (lock, read-write lock, semaphore, count-down latch) and on the manager's control channel is
/// refused by `build()`, with a message naming the missing
/// right, instead of failing every final unlock and never being woken while waiting.
#[test]
fn an_acl_user_without_channel_rights_is_refused_at_build() {
    let server = RedisServer::start();
    let cases: [(&str, &[&str], &str, &str); 7] = [
        // Redis 7's default for new users.
        (
            "nochannels",
            &["resetchannels"],
            "PUBLISH",
            "redisson_lock__channel:",
        ),
        (
            "nosubscribe",
            &["allchannels", "-subscribe"],
            "SUBSCRIBE",
            "redisson_lock__channel:",
        ),
        (
            "nopublish",
            &["allchannels", "-publish"],
            "PUBLISH",
            "redisson_lock__channel:",
        ),
        // Rights for some lock names only: the probe's random name is not among them.
        (
            "somelocks",
            &[
                "resetchannels",
                "&redisson_lock__channel:{orders*}",
                "&redis_rlock__control:*",
            ],
            "PUBLISH",
            "redisson_lock__channel:",
        ),
        // The lock channels only: the other kinds' waiters would be woken by polling alone.
        (
            "locksonly",
            &[
                "resetchannels",
                "&redisson_lock__channel:*",
                "&redis_rlock__control:*",
            ],
            "PUBLISH",
            "redisson_rwlock:",
        ),
        // Lock channels with nothing after the name: a fair lock's waiter channel has more.
        (
            "nofair",
            &[
                "resetchannels",
                "&redisson_lock__channel:{*}",
                "&redisson_rwlock:*",
                "&redisson_sc:*",
                "&redisson_countdownlatch__channel__*",
                "&redis_rlock__control:*",
            ],
            "PUBLISH",
            "redisson_lock__channel:",
        ),
        (
            "nocontrol",
            &[
                "resetchannels",
                "&redisson_lock__channel:*",
                "&redisson_rwlock:*",
                "&redisson_sc:*",
                "&redisson_countdownlatch__channel__*",
            ],
            "PUBLISH",
            "redis_rlock__control:",
        ),
    ];
    for (user, rules, right, channel) in cases {
        let url = acl_user(&server, user, rules);
        let started = Instant::now();
        let err = LockManager::new(&url).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        let text = err.to_string();
        assert!(err.is_connection_error(), "{user}: {text}");
        assert!(
            text.contains(&format!("{right} to \"{channel}")),
            "{user}: {text}"
        );
        assert!(text.contains("ACL SETUSER"), "{user}: {text}");
        if user == "nofair" {
            assert!(text.contains("}:rights-check\""), "{user}: {text}");
        }
        assert!(!text.contains(":pw@"), "{user}: {text}");
    }
    // Nothing of the refused managers is left subscribed.
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut server.conn())
        .unwrap();
    assert!(channels.is_empty(), "still subscribed: {channels:?}");
}

/// Invariant: `allchannels`, and exactly the channel patterns the error message suggests, are
/// enough: the user locks, waits (woken through pub/sub) and unlocks.
#[test]
fn an_acl_user_with_the_lock_channels_locks_waits_and_unlocks() -> Result<()> {
    let server = RedisServer::start();
    let users: [(&str, &[&str]); 2] = [
        ("all", &["allchannels"]),
        (
            "patterns",
            &[
                "resetchannels",
                "&redisson_lock__channel:*",
                "&redisson_rwlock:*",
                "&redisson_sc:*",
                "&redisson_countdownlatch__channel__*",
                "&redis_rlock__control:*",
            ],
        ),
    ];
    let mut conn = server.conn();
    for (user, rules) in users {
        let url = acl_user(&server, user, rules);
        let (holder, other) = (LockManager::new(&url)?, LockManager::new(&url)?);
        let name = format!("fault:acl:{user}");
        let held = holder.lock(&name)?;
        // Another manager: threads of one manager queue locally, without pub/sub.
        let waiter = support::Waiter::spawn(&other, &name);
        let channel = format!("redisson_lock__channel:{{{name}}}");
        assert!(support::await_subscribers(&mut conn, &channel, 1));
        let released = Instant::now();
        held.unlock()?;
        // Woken by the release's message, not by the 30 s lease running out.
        let after = waiter.acquired_since(released);
        assert!(after < Duration::from_secs(10), "{user}: {after:?}");

        // Another kind on its own channel: a semaphore's waiter is woken by the release too.
        let semaphore = format!("fault:acl:{user}:permits");
        assert!(holder.get_semaphore(&semaphore).try_set_permits(1)?);
        let taken = holder.get_semaphore(&semaphore).acquire_guard(1)?;
        let acquiring = {
            let other = other.clone();
            let semaphore = semaphore.clone();
            std::thread::spawn(move || -> Result<Instant> {
                other.get_semaphore(&semaphore).acquire(1)?;
                Ok(Instant::now())
            })
        };
        let channel = format!("redisson_sc:{{{semaphore}}}");
        assert!(support::await_subscribers(&mut conn, &channel, 1));
        let released = Instant::now();
        taken.release()?;
        let acquired = acquiring.join().expect("semaphore waiter")?;
        let after = acquired.saturating_duration_since(released);
        assert!(
            after < Duration::from_secs(2),
            "{user}: semaphore {after:?}"
        );
    }
    Ok(())
}

/// Invariant: once every guard is gone and every manager dropped, no lock key is left, the
/// only keys left are unlock latches and attempt markers that expire by themselves, and no
/// channel is subscribed.
#[test]
fn nothing_is_left_behind() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    {
        let a = LockManager::new(&server.url())?;
        let b = LockManager::new(&server.url())?;
        let held = a.lock("leftover:contended")?;
        let waiting = support::Waiter::spawn(&b, "leftover:contended");
        assert!(support::await_subscribers(
            &mut conn,
            "redisson_lock__channel:{leftover:contended}",
            1
        ));
        let (tx, rx) = mpsc::channel();
        thread::scope(|s| {
            s.spawn(|| {
                let outer = a.lock("leftover:reentrant").unwrap();
                let inner = a.lock_fenced("leftover:reentrant").unwrap();
                drop(inner);
                drop(outer);
                tx.send(()).unwrap();
            });
        });
        rx.recv().unwrap();
        let _fixed = a.lock_with_lease("leftover:fixed", Duration::from_secs(60))?;
        held.unlock()?;
        waiting.acquired_since(Instant::now());
    }
    let keys: Vec<String> = conn.keys("*").unwrap();
    for key in &keys {
        let ttl: i64 = conn.pttl(key).unwrap();
        let expires = key.starts_with("redisson_unlock_latch:")
            || key.starts_with("redis_rlock__attempt:{leftover:");
        let is_counter = key == "redisson_lock_token:{leftover:reentrant}";
        assert!(
            (expires && ttl > 0) || is_counter,
            "left behind: {key} (ttl {ttl} ms)"
        );
    }
    assert!(
        keys.iter().any(|k| k.starts_with("redisson_unlock_latch:")),
        "the check saw the latches: {keys:?}"
    );
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut conn)
        .unwrap();
    assert!(channels.is_empty(), "still subscribed: {channels:?}");
    Ok(())
}

/// A manager with one pooled connection, killed by the server, which is then frozen: every
/// call needs a new connection, and the frozen server accepts it (the kernel completes the
/// TCP handshake) but never answers its setup. The listener stays connected.
fn manager_whose_server_freezes_with_a_dead_pool(
    server: &RedisServer,
    response_timeout: Duration,
) -> Result<LockManager> {
    let manager = LockManager::builder(&server.url())
        .pool_size(1)
        .response_timeout(response_timeout)
        // Longer than the response timeout on purpose: it must not stretch a call.
        .connect_timeout(Duration::from_secs(5))
        .build()?;
    let mut conn = server.conn();
    support::await_listener(&mut conn, &manager);
    kill_normal_clients(&mut conn);
    server.freeze();
    Ok(manager)
}

/// Closes every command connection but the caller's (the pool's), as a server restart would.
fn kill_normal_clients(conn: &mut redis::Connection) {
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(conn)
        .unwrap();
    assert_eq!(support::client_count(conn, "normal"), 0, "pool closed");
}

/// What a timeout must look like: a timeout, saying what timed out, not the raw EAGAIN.
fn assert_readable_timeout(err: &redis_rlock::Error) {
    assert!(err.is_timeout(), "{err}");
    let text = err.to_string();
    assert!(text.contains("timed out"), "{text}");
    assert!(!text.contains("temporarily unavailable"), "{text}");
}

/// Invariant: with the server paused, a call that needs a new connection (the pooled one died)
/// returns within its wait plus one response timeout, however long the connect timeout, and
/// says it timed out; dropping the manager then does not wait for the server either.
#[test]
fn a_paused_server_bounds_calls_that_need_a_new_connection() -> Result<()> {
    let server = RedisServer::start();
    let response_timeout = Duration::from_secs(1);
    let manager = manager_whose_server_freezes_with_a_dead_pool(&server, response_timeout)?;
    // Slack for a loaded machine; far below a second connect or response timeout.
    let slack = Duration::from_millis(1500);

    for wait in [Duration::ZERO, Duration::from_millis(100)] {
        let started = Instant::now();
        let result = manager.try_lock("fault:paused-new-conn", wait);
        let took = started.elapsed();
        eprintln!("try_lock({wait:?}) took {took:?}: {result:?}");
        match result {
            Ok(guard) => assert!(guard.is_none(), "no lock while paused"),
            Err(err) => assert_readable_timeout(&err),
        }
        assert!(
            took < wait + response_timeout + slack,
            "try_lock({wait:?}) took {took:?}"
        );
    }

    let started = Instant::now();
    drop(manager);
    let took = started.elapsed();
    eprintln!("dropping the manager took {took:?}");
    assert!(took < response_timeout + slack, "drop took {took:?}");
    server.thaw();
    Ok(())
}

/// Invariant: with the server paused, releasing a lock whose pooled connection died returns
/// within two response timeouts however long the connect timeout (one for the release, one for
/// its resend after a lost reply, which is what lets an unlock whose reply was lost report
/// success), and says it timed out.
#[test]
fn a_paused_server_bounds_unlock_by_two_response_timeouts() -> Result<()> {
    let server = RedisServer::start();
    let response_timeout = Duration::from_secs(1);
    let manager = LockManager::builder(&server.url())
        .pool_size(1)
        .response_timeout(response_timeout)
        .connect_timeout(Duration::from_secs(5))
        .build()?;
    let guard = manager.lock("fault:paused-unlock")?;
    let mut conn = server.conn();
    support::await_listener(&mut conn, &manager);
    kill_normal_clients(&mut conn);
    server.freeze();

    let started = Instant::now();
    let err = guard.unlock().unwrap_err();
    let took = started.elapsed();
    eprintln!("unlock took {took:?}: {err}");
    assert_readable_timeout(&err);
    assert!(
        took < response_timeout * 2 + Duration::from_millis(1500),
        "unlock took {took:?}"
    );

    let started = Instant::now();
    drop(manager);
    let took = started.elapsed();
    eprintln!("dropping the manager took {took:?}");
    assert!(
        took < response_timeout + Duration::from_millis(1500),
        "drop took {took:?}"
    );
    server.thaw();
    Ok(())
}

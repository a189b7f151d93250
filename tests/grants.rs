//! Grants (docs/design/engine.md, "Grants"): a release hands the lock to the first waiting client of
//! this crate in the same script call, when every other subscriber of the lock's channel is
//! such a waiter; the waiter takes it when the grant's message comes, without a request of its
//! own. Whenever anyone else listens (a Redisson client), the release leaves the lock free as
//! before. The wire side of the protocol is checked with raw script calls, the client side
//! with managers.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::RedisServer;

const NAME: &str = "grants:1";
const CHANNEL: &str = "redisson_lock__channel:{grants:1}";
const WAITERS: &str = "redis_rlock__waiters:{grants:1}";

fn manager(server: &RedisServer) -> LockManager {
    LockManager::new(&server.url()).expect("manager")
}

/// A server, and two managers on it: one to hold the lock, one to wait for it.
fn two_managers() -> (RedisServer, LockManager, LockManager) {
    let server = RedisServer::start();
    let (holder, other) = (manager(&server), manager(&server));
    (server, holder, other)
}

/// Whether `manager`'s thread waiting on [`NAME`] is registered for a grant (its entry in the
/// waiters hash) and its listener subscribed: from then on a release may grant it the lock.
fn registered(conn: &mut redis::Connection, manager: &LockManager, subscribers: i64) -> bool {
    let fields: Vec<String> = conn.hkeys(WAITERS).unwrap();
    fields.iter().any(|f| f.starts_with(manager.client_id()))
        && support::numsub(conn, CHANNEL) == subscribers
}

/// A thread of `manager` that waits up to `wait` for [`NAME`], holds it until told, and
/// reports whether it got it.
fn waiter(
    manager: &LockManager,
    wait: Duration,
) -> (
    mpsc::Receiver<bool>,
    mpsc::Sender<()>,
    thread::JoinHandle<()>,
) {
    let (got, got_rx) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let manager = manager.clone();
    let handle = thread::spawn(move || {
        let guard = manager.try_lock(NAME, wait).expect("try_lock");
        got.send(guard.is_some()).unwrap();
        let _ = release_rx.recv();
        drop(guard);
    });
    (got_rx, release, handle)
}

/// The hold on [`NAME`] in Redis: `manager`'s, one hold (`why` says why that matters); its
/// owner field.
fn held_once_by(conn: &mut redis::Connection, manager: &LockManager, why: &str) -> String {
    let fields: Vec<(String, String)> = conn.hgetall(NAME).unwrap();
    assert_eq!(fields.len(), 1, "{fields:?}");
    let (owner, count) = fields.into_iter().next().unwrap();
    assert!(owner.starts_with(manager.client_id()), "{owner}");
    assert_eq!(count, "1", "{why}");
    owner
}

/// A proxy in front of `server` that holds back every STOP_WAITING call: a waiter whose wait
/// ended stays registered, and gets no answer, until the test says so.
fn stop_waiting_held_back(server: &RedisServer) -> support::proxy::Proxy {
    let proxy = support::proxy::Proxy::start(server.port());
    let stop_waiting = redis::Script::new(redis_rlock::lua::STOP_WAITING);
    proxy.hold_requests_containing(stop_waiting.get_hash().as_bytes());
    proxy
}

/// Once a waiter (behind `proxy`) is leaving, releases `guard`, which grants the lock to it.
fn grant_to_the_leaving_waiter(
    proxy: &support::proxy::Proxy,
    guard: redis_rlock::LockGuard,
    holder: &LockManager,
) -> Result<()> {
    assert!(support::eventually(Duration::from_secs(10), || proxy
        .held()
        >= 1));
    guard.unlock()?;
    assert_eq!(
        holder.stats().grants_given,
        1,
        "granted to the leaving waiter"
    );
    Ok(())
}

/// [`waiter`] for 20 s at most, once it is registered for a grant, with `subscribers` on the
/// lock's channel in all.
fn registered_waiter(
    manager: &LockManager,
    conn: &mut redis::Connection,
    subscribers: i64,
) -> (
    mpsc::Receiver<bool>,
    mpsc::Sender<()>,
    thread::JoinHandle<()>,
) {
    let parts = waiter(manager, Duration::from_secs(20));
    assert!(
        support::eventually(Duration::from_secs(10), || registered(
            conn,
            manager,
            subscribers
        )),
        "the other manager's thread registers as a waiter"
    );
    parts
}

#[test]
fn a_release_grants_the_lock_to_a_waiting_manager_which_takes_it_without_a_request() -> Result<()> {
    let (server, holder, other) = two_managers();
    let mut conn = server.conn();

    let guard = holder.lock(NAME)?;
    let (got, release, handle) = registered_waiter(&other, &mut conn, 1);
    guard.unlock()?;
    assert!(got.recv_timeout(Duration::from_secs(10)).unwrap());

    assert_eq!(holder.stats().grants_given, 1);
    assert_eq!(other.stats().grants_taken, 1);
    // The hold is the waiter's, counted once, with its lease.
    let owner = held_once_by(&mut conn, &other, "the grant counts once");
    // An acquire that takes something leaves its attempt marker; the grant was taken without
    // one (the waiter's registering attempts found the lock held, and took nothing).
    let marker = format!("redis_rlock__attempt:{{{NAME}}}:{owner}");
    assert!(
        !conn.exists::<_, bool>(&marker).unwrap(),
        "the granted waiter sent nothing to take the lock"
    );
    let pttl: i64 = conn.pttl(NAME).unwrap();
    assert!(pttl > 20_000, "the grant set the waiter's lease: {pttl}");

    release.send(()).unwrap();
    handle.join().unwrap();
    assert!(!conn.exists::<_, bool>(NAME).unwrap(), "released");
    assert!(
        !conn.exists::<_, bool>(WAITERS).unwrap(),
        "no registration outlives the wait"
    );
    Ok(())
}

#[test]
fn another_subscriber_on_the_channel_gets_the_lock_left_free_as_before() -> Result<()> {
    let (server, holder, other) = two_managers();
    let mut conn = server.conn();
    // A client that is not a registered waiter of ours listens (as a Redisson waiter does).
    let mut bystander_conn = server.conn();
    let mut bystander = support::watch_channel(&mut bystander_conn, CHANNEL);

    let guard = holder.lock(NAME)?;
    let (got, release, handle) = registered_waiter(&other, &mut conn, 2);
    guard.unlock()?;
    let message = bystander.get_message().expect("the unlock message");
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
    assert!(got.recv_timeout(Duration::from_secs(10)).unwrap());
    assert_eq!(holder.stats().grants_given, 0, "nothing granted");
    assert_eq!(other.stats().grants_taken, 0);
    release.send(()).unwrap();
    handle.join().unwrap();
    assert!(!conn.exists::<_, bool>(WAITERS).unwrap());
    Ok(())
}

#[test]
fn a_waiter_that_gives_up_leaves_no_registration_and_is_not_granted_later() -> Result<()> {
    let (server, holder, other) = two_managers();
    let mut conn = server.conn();

    let guard = holder.lock(NAME)?;
    let (got, release, handle) = waiter(&other, Duration::from_millis(600));
    assert!(
        !got.recv_timeout(Duration::from_secs(10)).unwrap(),
        "timed out"
    );
    assert!(
        !conn.exists::<_, bool>(WAITERS).unwrap(),
        "the registration is taken out when the wait ends"
    );
    drop(release);
    handle.join().unwrap();
    guard.unlock()?;
    assert!(!conn.exists::<_, bool>(NAME).unwrap(), "left free");
    assert_eq!(holder.stats().grants_given, 0);
    Ok(())
}

/// The waiters hash and the three scripts, raw: a registration whose manager no longer
/// listens on its control channel is dropped, never granted (a waiter whose process died),
/// even with another subscriber on the lock's channel; once the waiter listens, it is granted,
/// the grant's number is published, and the waiter's next attempt or its leaving finds the
/// grant without taking a second hold.
#[test]
fn the_wire_protocol_of_a_grant() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
    let release = redis::Script::new(redis_rlock::lua::RELEASE);
    let stop_waiting = redis::Script::new(redis_rlock::lua::STOP_WAITING);
    let holder = "00000000-0000-0000-0000-000000000001:1";
    let waiter = "00000000-0000-0000-0000-000000000002:7";
    let control = "redis_rlock__control:{00000000-0000-0000-0000-000000000002}";
    let attempt_with =
        |conn: &mut redis::Connection, owner: &str, id: &str, wait: &str, control| {
            acquire
                .key(NAME)
                .key(format!("redis_rlock__attempt:{{{NAME}}}:{owner}"))
                .key(WAITERS)
                .arg(30_000)
                .arg(owner)
                .arg(id)
                .arg(11_000)
                .arg(wait)
                .arg("")
                .arg(1_000)
                .arg(control)
                .invoke::<Option<i64>>(conn)
                .expect("acquire")
        };
    let attempt = |conn: &mut redis::Connection, owner: &str, id: &str, wait: &str| {
        attempt_with(
            conn,
            owner,
            id,
            wait,
            if wait.is_empty() { "" } else { control },
        )
    };
    let unlock = |conn: &mut redis::Connection, owner: &str, latch: &str| {
        release
            .key(NAME)
            .key(CHANNEL)
            .key(format!("redisson_unlock_latch:{{{NAME}}}:{latch}"))
            .key(WAITERS)
            .arg("0")
            .arg(30_000)
            .arg(owner)
            .arg("publish")
            .arg(11_000)
            .arg(0)
            .arg("")
            .arg(0)
            .arg(0)
            .arg("numsub")
            .invoke::<Option<i64>>(conn)
            .expect("release")
    };

    // A registered waiter whose manager no longer listens, and somebody else (a Redisson
    // waiter, say) on the lock's channel: the release leaves the lock free for that one, and
    // drops the dead registration.
    assert_eq!(attempt(&mut conn, holder, "h1", ""), None);
    // Without a control channel an attempt only looks for a grant: it registers nothing.
    assert!(attempt_with(&mut conn, waiter, "w0", "4242", "").is_some());
    assert!(!conn.exists::<_, bool>(WAITERS).unwrap());
    assert!(attempt(&mut conn, waiter, "w1", "4242").is_some());
    let entry: String = conn.hget(WAITERS, waiter).unwrap();
    assert!(
        entry.starts_with("w 1 ") && entry.ends_with(&format!(" 30000 4242 {control}")),
        "{entry}"
    );
    let mut bystander_conn = server.conn();
    let mut bystander = support::watch_channel(&mut bystander_conn, CHANNEL);
    assert_eq!(unlock(&mut conn, holder, "l1"), Some(3), "left free");
    assert_eq!(
        bystander
            .get_message()
            .unwrap()
            .get_payload::<String>()
            .unwrap(),
        "0"
    );
    assert!(!conn.exists::<_, bool>(NAME).unwrap());
    assert!(
        !conn.exists::<_, bool>(WAITERS).unwrap(),
        "the dead registration is gone"
    );
    drop(bystander);
    drop(bystander_conn);
    assert!(support::await_subscribers(&mut conn, CHANNEL, 0));

    // Registered again, and its manager listens on both channels: the release grants it the
    // lock and publishes its number.
    assert_eq!(attempt(&mut conn, holder, "h2", ""), None);
    assert!(attempt(&mut conn, waiter, "w2", "4242").is_some());
    let mut listener_conn = server.conn();
    let mut listener = support::watch_channel(&mut listener_conn, CHANNEL);
    let mut control_conn = server.conn();
    let _control = support::watch_channel(&mut control_conn, control);
    assert_eq!(unlock(&mut conn, holder, "l2"), Some(4), "granted");
    let message = listener.get_message().expect("the grant's message");
    assert_eq!(message.get_payload::<String>().unwrap(), "4242");
    let count: String = conn.hget(NAME, waiter).unwrap();
    assert_eq!(count, "1");
    let marker: String = conn.hget(WAITERS, waiter).unwrap();
    assert!(marker.starts_with("g 4242 "), "{marker}");

    // Leaving finds the grant (twice: a repeat after a lost reply answers the same) ...
    let left = |conn: &mut redis::Connection| -> i64 {
        stop_waiting
            .key(NAME)
            .key(WAITERS)
            .arg(waiter)
            .arg("4242")
            .arg(30_000)
            .invoke(conn)
            .expect("stop waiting")
    };
    assert_eq!(left(&mut conn), 1);
    assert_eq!(left(&mut conn), 1);
    // ... and so does the owner's next attempt while it holds nothing as far as it knows
    // (it names the waiters hash), with or without a wait number: no second hold.
    assert_eq!(attempt_with(&mut conn, waiter, "w3", "", ""), None);
    let count: String = conn.hget(NAME, waiter).unwrap();
    assert_eq!(count, "1", "the grant counts once");
    assert!(
        !conn.exists::<_, bool>(WAITERS).unwrap(),
        "the grant's marker went with it"
    );
    // Taken, the grant is gone: a re-entry (which does not name the waiters hash) counts.
    let reentry: Option<i64> = acquire
        .key(NAME)
        .key(format!("redis_rlock__attempt:{{{NAME}}}:{waiter}"))
        .arg(30_000)
        .arg(waiter)
        .arg("w4")
        .arg(11_000)
        .invoke(&mut conn)
        .expect("acquire");
    assert_eq!(reentry, None);
    let count: String = conn.hget(NAME, waiter).unwrap();
    assert_eq!(count, "2");
}

/// A Redis user without the right to `PUBSUB` cannot count the channel's subscribers: its
/// releases grant nothing, and still release, publish and report success.
#[test]
fn without_the_right_to_count_subscribers_a_release_leaves_the_lock_free() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nocount")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-pubsub")
        .exec(&mut conn)
        .unwrap();
    let url = format!("redis://nocount:secret@127.0.0.1:{}/", server.port());
    let holder = LockManager::new(&url)?;
    let other = manager(&server);

    let guard = holder.lock(NAME)?;
    let (got, release, handle) = registered_waiter(&other, &mut conn, 1);
    guard.unlock()?;
    assert!(got.recv_timeout(Duration::from_secs(10)).unwrap());
    assert_eq!(holder.stats().grants_given, 0);
    release.send(()).unwrap();
    handle.join().unwrap();
    Ok(())
}

/// A waiter whose leaving gets no answer (held back until it times out) may have been granted
/// the lock meanwhile without learning of it: the same thread's next acquire takes that grant
/// and holds the lock once, not twice (a second hold would outlive its unlock).
#[test]
fn a_grant_its_waiter_never_learned_of_is_taken_by_the_next_acquire_once() -> Result<()> {
    never_learned_of_then(|manager| manager.try_lock(NAME, Duration::from_secs(5)))
}

/// As above, with a fenced acquire next: it takes the grant too, with a token.
#[test]
fn a_grant_its_waiter_never_learned_of_is_taken_by_a_fenced_acquire_once() -> Result<()> {
    never_learned_of_then(|manager| {
        let guard = manager.try_lock_fenced(NAME, Duration::from_secs(5))?;
        assert!(
            guard.as_ref().and_then(|g| g.fencing_token()).is_some(),
            "a token"
        );
        Ok(guard)
    })
}

fn never_learned_of_then(
    next: fn(&LockManager) -> Result<Option<redis_rlock::LockGuard>>,
) -> Result<()> {
    let server = RedisServer::start();
    let proxy = stop_waiting_held_back(&server);
    let holder = manager(&server);
    let other = LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .build()?;
    let mut conn = server.conn();

    let guard = holder.lock(NAME)?;
    let (first_tx, first) = mpsc::channel();
    let (again_tx, again) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel();
    let (unlock_tx, unlock) = mpsc::channel::<()>();
    let waiter = {
        let other = other.clone();
        thread::spawn(move || -> Result<()> {
            first_tx
                .send(other.try_lock(NAME, Duration::from_millis(800))?.is_some())
                .unwrap();
            again_tx.send(()).unwrap();
            let guard = next(&other)?;
            held_tx.send(guard.is_some()).unwrap();
            unlock.recv().unwrap();
            drop(guard);
            Ok(())
        })
    };
    // The wait ends and its leaving is held back: the release now grants the lock to it.
    grant_to_the_leaving_waiter(&proxy, guard, &holder)?;
    assert!(
        !first.recv_timeout(Duration::from_secs(10)).unwrap(),
        "the leaving got no answer: the first wait reports no lock"
    );
    again.recv().unwrap();
    assert!(held.recv_timeout(Duration::from_secs(10)).unwrap());
    held_once_by(&mut conn, &other, "the grant was taken, not re-entered");
    unlock_tx.send(()).unwrap();
    waiter.join().unwrap()?;
    assert!(!conn.exists::<_, bool>(NAME).unwrap(), "released for good");
    Ok(())
}

/// A release that grants the lock while the waiter is already leaving (its wait ended): the
/// leaving finds the grant, and the wait returns the lock instead of nothing.
#[test]
fn a_grant_made_while_its_waiter_leaves_is_returned_to_it() -> Result<()> {
    let server = RedisServer::start();
    let proxy = stop_waiting_held_back(&server);
    let holder = manager(&server);
    let other = LockManager::new(&proxy.url())?;
    let mut conn = server.conn();

    let guard = holder.lock(NAME)?;
    let (got, release, handle) = waiter(&other, Duration::from_millis(800));
    grant_to_the_leaving_waiter(&proxy, guard, &holder)?;
    proxy.release_requests();
    assert!(
        got.recv_timeout(Duration::from_secs(10)).unwrap(),
        "the wait returns the granted lock"
    );
    held_once_by(&mut conn, &other, "the grant counts once");
    release.send(()).unwrap();
    handle.join().unwrap();
    assert!(!conn.exists::<_, bool>(NAME).unwrap(), "released");
    assert!(!conn.exists::<_, bool>(WAITERS).unwrap());
    Ok(())
}

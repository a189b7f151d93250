//! W3's floors: the least a woken lock can do with no crate code (a raw pub/sub
//! listener, a waiter's own subscription, BLPOP), timed as W3 times the lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock_testkit as support;

use crate::raw_lock::RawLock;
use crate::w3::settle_w3;

/// The acquire script (`redis_rlock::lua::ACQUIRE`, loaded as `acquire`) for `owner` on lock
/// `key`, with a 30 s lease, as the raw handoffs' waiters send it.
fn raw_acquire_call(
    acquire: &redis::Script,
    key: &str,
    owner: &str,
    attempt_id: u64,
) -> redis::Cmd {
    let mut call = redis::cmd("EVALSHA");
    call.arg(acquire.get_hash())
        .arg(3)
        .arg(key)
        .arg(format!("redis_rlock__attempt:{{{key}}}:{owner}"))
        .arg(format!("redis_rlock__waiters:{{{key}}}"))
        .arg(30_000)
        .arg(owner)
        .arg(attempt_id)
        .arg(11_000);
    call
}

/// Who sends a raw pub/sub-woken waiter's acquire.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum RawSender {
    /// The waiting thread, once the listener has woken it: what this crate does.
    Waiter,
    /// The listener thread, on the waiter's connection, before it wakes the waiter, who then
    /// only reads the reply: the thread wake-up overlaps the round trip (the idea in the
    /// fairness issue's W3 section, at its floor).
    Listener,
}

/// The least a pub/sub-woken lock can do, with no crate code: a listener thread blocked on
/// a subscribed connection wakes a waiting thread through a condvar, and the acquire script
/// goes out on the waiter's own connection, sent by `sender`. Measured from the release being
/// sent (raw EVALSHA, which publishes) to the waiter's acquire returning.
pub(crate) fn raw_pubsub_handoff(url: &str, n: usize, sender: RawSender) -> Vec<Duration> {
    use std::sync::{mpsc, Arc, Condvar};
    let key = "loadgen:w3:raw";
    let channel = "redisson_lock__channel:{loadgen:w3:raw}";
    let owner = "00000000-0000-0000-0000-000000000000:2";
    /// What the listener and the waiter share.
    #[derive(Default)]
    struct Wake {
        messages: u64,
        /// `RawSender::Listener`: the waiter's connection and its packed acquire, left for
        /// the listener to send on the next message.
        armed: Option<(redis::Connection, Vec<u8>)>,
        /// The connection the listener sent the acquire on, its reply unread.
        in_flight: Option<redis::Connection>,
    }
    let woken = Arc::new((Mutex::new(Wake::default()), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));

    let mut listener_conn = support::nodelay_conn(url);
    let listener = {
        let (woken, stop) = (Arc::clone(&woken), Arc::clone(&stop));
        let (ready_tx, ready) = mpsc::channel();
        let handle = thread::spawn(move || {
            let mut pubsub = listener_conn.as_pubsub();
            pubsub.subscribe(channel).expect("SUBSCRIBE");
            pubsub
                .set_read_timeout(Some(Duration::from_millis(200)))
                .expect("read timeout");
            ready_tx.send(()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                if pubsub.get_message().is_ok() {
                    let (state, wake) = &*woken;
                    let mut state = state.lock().unwrap();
                    state.messages += 1;
                    if let Some((mut conn, packed)) = state.armed.take() {
                        conn.send_packed_command(&packed).expect("send the acquire");
                        state.in_flight = Some(conn);
                    }
                    drop(state);
                    wake.notify_one();
                }
            }
        });
        ready.recv().expect("listener subscribed");
        handle
    };
    let (done_tx, done) = mpsc::channel::<Instant>();
    let (go_tx, go) = mpsc::channel::<()>();
    let waiter = {
        let woken = Arc::clone(&woken);
        let mut conn = Some(support::nodelay_conn(url));
        let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
        acquire
            .load(conn.as_mut().expect("a connection"))
            .expect("SCRIPT LOAD");
        thread::spawn(move || {
            let mut seen = 0;
            while go.recv().is_ok() {
                // One attempt id per wake-up.
                let call = |attempt_id| raw_acquire_call(&acquire, key, owner, attempt_id);
                let (state, wake) = &*woken;
                let mut state = state.lock().unwrap();
                if sender == RawSender::Listener {
                    let packed = call(seen + 1).get_packed_command();
                    state.armed = Some((conn.take().expect("the connection"), packed));
                }
                while state.messages == seen {
                    state = wake.wait(state).unwrap();
                }
                seen = state.messages;
                let reply = match state.in_flight.take() {
                    Some(sent) => {
                        drop(state);
                        let sent = conn.insert(sent);
                        sent.recv_response().expect("raw acquire")
                    }
                    None => {
                        if let Some((own, _)) = state.armed.take() {
                            conn = Some(own);
                        }
                        drop(state);
                        let own = conn.as_mut().expect("the connection");
                        call(seen).query(own).expect("raw acquire")
                    }
                };
                let acquired = Instant::now();
                let held_by: Option<i64> = redis::from_redis_value(reply).expect("a PTTL or nil");
                assert!(held_by.is_none(), "the raw waiter gets the lock");
                let own = conn.as_mut().expect("the connection");
                let _: () = redis::cmd("DEL").arg(key).query(own).expect("DEL");
                done_tx.send(acquired).unwrap();
            }
        })
    };
    let samples = time_raw_handoffs(url, key, n, go_tx, &done);
    stop.store(true, Ordering::Relaxed);
    waiter.join().expect("raw waiter");
    listener.join().expect("raw listener");
    samples
}

/// The holder's side of a raw handoff, `n` times: take `key` with the raw scripts, tell the
/// waiter (`go`) to wait, let it settle as long as every W3 waiter, release, and time from the
/// release being sent (as in [`w3_handoff`]) to the instant the waiter reports on `done`.
/// Dropping `go` at the end tells the waiter to finish.
fn time_raw_handoffs(
    url: &str,
    key: &str,
    n: usize,
    go: std::sync::mpsc::Sender<()>,
    done: &std::sync::mpsc::Receiver<Instant>,
) -> Vec<Duration> {
    let mut holder = RawLock::connect(url, key);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        holder.acquire();
        go.send(()).unwrap();
        // The waiter blocks at once; then it sleeps as long as the other handoffs' waiters.
        settle_w3(|| true);
        let released = Instant::now();
        holder.release();
        let acquired = done.recv().expect("raw waiter");
        samples.push(acquired.saturating_duration_since(released));
    }
    samples
}

/// What the raw own-subscription waiter sends to take the lock.
#[derive(Clone, Copy)]
pub(crate) enum RawAcquire {
    /// This crate's acquire script (Redisson's hash and the attempt marker).
    Script,
    /// `SET NX PX`, as python-redis-lock's waiter: what the script costs beyond it.
    SetNx,
}

/// The floor of any pub/sub-woken handoff, with no crate code: the waiting thread itself
/// reads its own subscribed RESP3 connection (RESP3 lets a subscribed connection send other
/// commands) and, on the unlock message, sends its acquire (`acquire_with`) on that same
/// connection.
/// One thread wake-up and one round trip on a connection that just read, as a BLPOP waiter;
/// but each waiter holds a connection of its own, as with BLPOP. Measured as
/// [`raw_pubsub_handoff`].
pub(crate) fn raw_own_subscription_handoff(
    url: &str,
    n: usize,
    acquire_with: RawAcquire,
) -> Vec<Duration> {
    use redis::IntoConnectionInfo;
    use std::sync::mpsc;
    let key = "loadgen:w3:own";
    let channel = "redisson_lock__channel:{loadgen:w3:own}";
    let owner = "00000000-0000-0000-0000-000000000000:3";
    let info = url.into_connection_info().expect("URL");
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let info = info
        .set_redis_settings(settings)
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    let mut conn = redis::Client::open(info)
        .and_then(|c| c.get_connection())
        .expect("RESP3 connection");
    let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
    acquire.load(&mut conn).expect("SCRIPT LOAD");
    conn.send_packed_command(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command())
        .expect("SUBSCRIBE");
    match conn.recv_response().expect("SUBSCRIBE confirmed") {
        redis::Value::Push { .. } => {}
        other => panic!("SUBSCRIBE answered {other:?}"),
    }
    let (go_tx, go) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<Instant>();
    let waiter = thread::spawn(move || {
        let mut attempt = 0u64;
        while go.recv().is_ok() {
            // Blocked in the read until the unlock message.
            loop {
                match conn.recv_response().expect("unlock message") {
                    redis::Value::Push {
                        kind: redis::PushKind::Message,
                        ..
                    } => break,
                    _ => continue,
                }
            }
            attempt += 1;
            let call = match acquire_with {
                RawAcquire::Script => raw_acquire_call(&acquire, key, owner, attempt),
                RawAcquire::SetNx => {
                    let mut call = redis::cmd("SET");
                    call.arg(key).arg(owner).arg("NX").arg("PX").arg(30_000);
                    call
                }
            };
            conn.send_packed_command(&call.get_packed_command())
                .expect("send the acquire");
            let reply = loop {
                match conn.recv_response().expect("raw acquire") {
                    redis::Value::Push { .. } => continue,
                    reply => break reply,
                }
            };
            let acquired = Instant::now();
            let acquired_now = match acquire_with {
                RawAcquire::Script => reply == redis::Value::Nil,
                RawAcquire::SetNx => reply == redis::Value::Okay,
            };
            assert!(acquired_now, "the raw waiter gets the lock: {reply:?}");
            conn.send_packed_command(&redis::cmd("DEL").arg(key).get_packed_command())
                .expect("DEL");
            loop {
                if !matches!(
                    conn.recv_response().expect("DEL"),
                    redis::Value::Push { .. }
                ) {
                    break;
                }
            }
            done_tx.send(acquired).unwrap();
        }
    });
    let samples = time_raw_handoffs(url, key, n, go_tx, &done);
    waiter.join().expect("raw waiter");
    samples
}

/// The release of python-redis-lock's handoff (ionelmc's library), written here from its
/// documented algorithm: if the caller still owns the lock, empty the signal list, push one
/// token onto it (so that exactly one `BLPOP` waiter wakes), let the list expire, and delete
/// the lock. KEYS: the lock, the signal list; ARGV: the owner's token, the list's expiry in ms.
const BLPOP_RELEASE: &str = r#"
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call("del", KEYS[2])
redis.call("lpush", KEYS[2], 1)
redis.call("pexpire", KEYS[2], ARGV[2])
redis.call("del", KEYS[1])
return 1
"#;

/// python-redis-lock's handoff done raw, for comparison with pub/sub: the waiter retries
/// `SET NX PX` and, while that fails, blocks in `BLPOP lock-signal:<name>` on its own
/// connection; the release pushes a token there. Measured as in [`raw_pubsub_handoff`]: from
/// the release returning to the waiter's successful `SET NX` returning. A waiter needs no
/// listener thread, but each one blocks a connection of its own.
pub(crate) fn blpop_handoff(url: &str, n: usize) -> Vec<Duration> {
    use std::sync::mpsc;
    let key = "loadgen:w3:blpop";
    let signal = "lock-signal:loadgen:w3:blpop";
    let mut waiter_conn = support::nodelay_conn(url);
    let waiter_id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut waiter_conn)
        .expect("CLIENT ID");
    let (go_tx, go) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<Instant>();
    let waiter = thread::spawn(move || {
        let mut conn = waiter_conn;
        while go.recv().is_ok() {
            loop {
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg("waiter")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query(&mut conn)
                    .expect("SET NX");
                if set.is_some() {
                    break;
                }
                // python-redis-lock blocks for the lock's expiry; 5 s is longer than any
                // handoff here and bounds a lost signal.
                let _: Option<(String, String)> = conn.blpop(signal, 5.0).expect("BLPOP");
            }
            let acquired = Instant::now();
            let _: () = conn.del(key).expect("DEL");
            done_tx.send(acquired).unwrap();
        }
    });

    let mut conn = support::nodelay_conn(url);
    let release = redis::Script::new(BLPOP_RELEASE);
    release.load(&mut conn).expect("SCRIPT LOAD");
    let mut observer = support::nodelay_conn(url);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let _: () = conn.del(&[key, signal]).expect("DEL");
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("holder")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut conn)
            .expect("SET NX");
        assert!(set.is_some(), "the BLPOP holder gets the free lock");
        go_tx.send(()).unwrap();
        // The waiter is blocked once the server lists its connection as blocked in BLPOP.
        let blocked = settle_w3(|| {
            let line: String = redis::cmd("CLIENT")
                .arg("LIST")
                .arg("ID")
                .arg(waiter_id)
                .query(&mut observer)
                .expect("CLIENT LIST");
            line.contains("cmd=blpop") && line.contains("flags=b")
        });
        assert!(blocked, "the BLPOP waiter blocked");
        let released_at = Instant::now(); // from the send, as in w3_handoff
        let released: i64 = release
            .key(key)
            .key(signal)
            .arg("holder")
            .arg(1_000)
            .invoke(&mut conn)
            .expect("BLPOP release");
        assert_eq!(released, 1, "the BLPOP holder held the lock");
        let acquired = done.recv().expect("BLPOP waiter");
        samples.push(acquired.saturating_duration_since(released_at));
    }
    drop(go_tx);
    waiter.join().expect("BLPOP waiter");
    samples
}

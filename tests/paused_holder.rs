//! A holder process stopped with SIGSTOP past its lease (a stand-in for a long GC pause):
//! what fencing protects, and what no lock can.
//!
//! The child is this test binary run again with only the ignored test `child_role`.

use redis_rlock_testkit as support;

use std::io::{BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::{child_process, read_until_marker, RedisServer};

const URL: &str = "REDIS_RLOCK_TEST_URL";
const WRITE: &str = "REDIS_RLOCK_TEST_WRITE";
const LOCK: &str = "paused:resource-lock";

/// The protected resource: a value and the highest token it accepted. A fenced write is
/// refused when its token is lower than that; an unfenced write is always taken.
const FENCED_WRITE: &str = r#"
local highest = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[2]) < highest then return 0 end
redis.call('set', KEYS[2], ARGV[2])
redis.call('set', KEYS[1], ARGV[1])
return 1
"#;

fn write(conn: &mut redis::Connection, value: &str, token: Option<u64>) -> bool {
    match token {
        Some(token) => {
            let accepted: i64 = redis::Script::new(FENCED_WRITE)
                .key("paused:resource")
                .key("paused:resource-token")
                .arg(value)
                .arg(token.to_string())
                .invoke(conn)
                .unwrap();
            accepted == 1
        }
        None => {
            let _: () = conn.set("paused:resource", value).unwrap();
            true
        }
    }
}

/// Entry point of the child process; does nothing useful when run directly.
#[test]
#[ignore = "entry point for child processes spawned by the other tests"]
fn child_role() {
    let url = std::env::var(URL).expect("spawned with a URL");
    let fenced_write = std::env::var(WRITE).expect("spawned with a write mode") == "fenced";
    let manager = LockManager::builder(&url)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let guard = manager.lock_fenced(LOCK).unwrap();
    let token = guard.fencing_token().unwrap();
    println!("LOCKED {token}");
    // Stopped here by the parent, then resumed and told to go on.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let lost = guard.is_lost();
    let accepted = write(
        &mut conn,
        "written by the paused holder",
        fenced_write.then_some(token),
    );
    let unlock = match guard.unlock() {
        Ok(()) => "ok".to_string(),
        Err(err) if err.is_not_held() => "not-held".to_string(),
        Err(err) => format!("error {err}"),
    };
    println!("AFTER lost={lost} accepted={accepted} unlock={unlock}");
}

/// What the resumed child reported.
struct Resumed {
    lost: bool,
    accepted: bool,
    unlock: String,
}

/// Runs the scenario: the child locks (fenced) and is stopped; its lease runs out; this
/// process takes the lock with a newer token and writes; the child is resumed and writes
/// (fenced or not) and unlocks. Returns the child's and this side's tokens and the report.
fn pause_holder_past_its_lease(
    server: &RedisServer,
    fenced_write: bool,
) -> (u64, u64, Resumed, LockManager) {
    let mut child = child_process(
        "child_role",
        &[
            (URL, server.url()),
            (WRITE, if fenced_write { "fenced" } else { "plain" }.into()),
        ],
    )
    .stdin(Stdio::piped())
    .spawn()
    .expect("spawn the holder");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let first: u64 = read_until_marker(&mut out, "LOCKED ").parse().unwrap();

    let pid = child.id().to_string();
    let signal = |sig: &str| {
        assert!(std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    let mut conn = server.conn();
    // With its watchdog stopped too, the lock expires after its 600 ms lease.
    assert!(
        support::eventually(Duration::from_secs(10), || !conn
            .exists::<_, bool>(LOCK)
            .unwrap()),
        "the stopped holder's lock expires"
    );
    let manager = LockManager::new(&server.url()).unwrap();
    let guard = manager.lock_fenced(LOCK).unwrap();
    let second = guard.fencing_token().unwrap();
    assert!(write(&mut conn, "written by the new holder", Some(second)));

    signal("-CONT");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let report = read_until_marker(&mut out, "AFTER ");
    assert!(child.wait().unwrap().success());
    let field = |name: &str| {
        report
            .split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_string()
    };
    let resumed = Resumed {
        lost: field("lost") == "true",
        accepted: field("accepted") == "true",
        unlock: field("unlock"),
    };
    // The new holder still holds its lock, untouched by the old one's unlock.
    assert_eq!(
        manager.get_lock(LOCK).hold_count().unwrap(),
        1,
        "the new holder's hold is untouched by the old one's unlock"
    );
    drop(guard);
    (first, second, resumed, manager)
}

/// Invariant: a holder stopped past its lease loses the lock to another process, which gets
/// a larger fencing token; when the first resumes, its guard reports the loss, its fenced
/// write is refused, and its unlock fails without touching the new owner.
#[test]
fn a_holder_stopped_past_its_lease_is_fenced_off() -> Result<()> {
    let server = RedisServer::start();
    let (first, second, resumed, _manager) = pause_holder_past_its_lease(&server, true);
    assert!(second > first, "{first} then {second}");
    assert!(resumed.lost, "the resumed guard knows its lock is lost");
    assert!(!resumed.accepted, "its stale write is refused");
    assert_eq!(resumed.unlock, "not-held");
    let value: String = server.conn().get("paused:resource").unwrap();
    assert_eq!(value, "written by the new holder");
    Ok(())
}

/// An expected violation, asserted as such: without fencing, a holder paused past its lease
/// does overlap with the next holder: its write lands although the lock is someone else's.
/// What no client can prevent, both safeguards detect: the guard reports the loss, and the
/// token the write would have carried is older than the new holder's.
#[test]
fn without_fencing_a_paused_holder_overlaps_and_the_safeguards_catch_it() -> Result<()> {
    let server = RedisServer::start();
    let (first, second, resumed, _manager) = pause_holder_past_its_lease(&server, false);
    assert!(
        resumed.accepted,
        "the unfenced write lands: the overlap happens"
    );
    let value: String = server.conn().get("paused:resource").unwrap();
    assert_eq!(
        value, "written by the paused holder",
        "the new holder's work is overwritten"
    );
    assert!(resumed.lost, "the lost signal catches it");
    assert!(first < second, "a fencing check would have refused it");
    assert_eq!(resumed.unlock, "not-held");
    Ok(())
}

//! A process stopped and continued (Ctrl-Z and `fg`, a debugger, a frozen container) while
//! it connects: Linux fails the pending read of a socket with a timeout with EINTR then, with
//! no signal handler installed (signal(7)). Nothing is wrong with Redis, so the connect is
//! made again instead of failing the caller.
//!
//! This binary stops itself, so it holds this one test only.

mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_lock::LockManager;
use support::RedisServer;

struct Recorder(Mutex<Vec<String>>);

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.target().starts_with("redis_lock")
    }
    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap().push(format!("{}", record.args()));
        }
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));

/// The scheduler state of thread `tid` of this process (`R`, `S`, `T`, ...).
fn thread_state(tid: &str) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("stat");
    // The name in parentheses may hold spaces: the state follows the last ')'.
    let after = &stat[stat.rfind(')').expect("comm") + 1..];
    after.trim_start().chars().next().expect("state")
}

#[test]
fn a_connect_interrupted_by_a_stop_and_continue_of_the_process_is_made_again() {
    log::set_logger(&RECORDER).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Debug);
    let server = RedisServer::start();
    // A frozen server accepts the TCP connection (the kernel does) but answers nothing: the
    // builder's first connect waits in its setup read (the SELECT of database 1) until the
    // server is thawed.
    server.freeze();
    let url = format!("{}1", server.url());
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let building = std::thread::spawn(move || {
        let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        let tid = me.file_name().expect("tid").to_string_lossy().into_owned();
        tid_tx.send(tid).expect("send tid");
        let manager = LockManager::builder(&url)
            .connect_timeout(Duration::from_secs(60))
            .response_timeout(Duration::from_secs(60))
            .build()?;
        let guard = manager.lock("after-a-stop")?;
        guard.unlock()
    });
    let tid = tid_rx.recv().expect("the building thread's id");

    // The builder sleeps in its read for as long as the server is frozen: wait until it has
    // slept for a while (a lock or an allocation never sleeps 100 ms here).
    let started = Instant::now();
    let mut asleep_since: Option<Instant> = None;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the building thread never blocked in its read"
        );
        match (thread_state(&tid), asleep_since) {
            ('S', None) => asleep_since = Some(Instant::now()),
            ('S', Some(since)) if since.elapsed() > Duration::from_millis(100) => break,
            ('S', Some(_)) => {}
            _ => asleep_since = None,
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    // Stop this whole process and continue it, as a shell's Ctrl-Z and `fg` would.
    let pid = std::process::id().to_string();
    let status = std::process::Command::new("sh")
        .args(["-c", "kill -STOP $1; sleep 0.3; kill -CONT $1", "sh", &pid])
        .status()
        .expect("run sh");
    assert!(status.success(), "stopping and continuing the test process");
    server.thaw();

    let built = building.join().expect("the building thread");
    let logged = RECORDER.0.lock().unwrap().clone();
    assert!(
        built.is_ok(),
        "the connect failed after the stop: {built:?}; logged: {logged:?}"
    );
    assert!(
        logged
            .iter()
            .any(|l| l.contains("connecting to Redis was interrupted")),
        "the stop did not interrupt the connect, so this run proved nothing; logged: {logged:?}"
    );
}

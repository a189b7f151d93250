//! A worker process: `campaign worker ...`, started by the driver (several per row, each with
//! several threads). Each thread alternates a fenced round (take the fenced lock, write its
//! token to the store) and a short round (take the plain, spin or string lock in turn, each
//! its own name, or a spin lock on the plain lock's name, and stay a while), and appends
//! what happened to the process's history file until the driver's stop file appears. Two
//! more threads make calls with a long wait: a waiter (the waited lock, which every process
//! contends for) and a fresh caller (its own lock, taken again every 100 ms, so that calls
//! start during a fault).

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_rlock::{AcquireOptions, LockGuard, LockManager};

use super::clock::now_ns;
use super::history::{End, Fail, Hold, Kind, Record, Write};
use super::store::Store;

/// Both names share a hash tag: on a cluster they live on one master, the one faults hit.
pub const FENCED: &str = "{campaign}:fenced";
pub const PLAIN: &str = "{campaign}:plain";
/// The spin lock's name: its holders never publish, its waiters are woken by client tracking.
pub const SPIN: &str = "{campaign}:spin";
/// The string lock's name (redis-py's format): no unlock message either.
pub const STRING: &str = "{campaign}:string";
/// The short rounds' locks, taken in turn (a thread starts at its own index, so that every
/// name has holders from the first rounds).
const SHORT_ROUNDS: [Kind; 4] = [Kind::Plain, Kind::Spin, Kind::StringLock, Kind::SpinOnPlain];
/// How long one acquire waits: long enough for a holder to finish, short enough that a
/// worker records its failures while a fault lasts.
const WAIT: Duration = Duration::from_secs(2);
/// Time inside a plain, spin or string critical section, so that overlaps have room to show.
const PLAIN_HOLD: Duration = Duration::from_millis(20);
/// Work between a fenced acquire and its write: a pause that lands here makes the write late.
const FENCED_WORK: Duration = Duration::from_millis(10);
/// The lock every process's waiter thread contends for, on the faults' master too.
pub const WAITED: &str = "{campaign}:waited";
/// How long the waiter and fresh threads wait: longer than any failover here takes
/// (README: a waiter rides out a failover within its wait).
pub const LONG_WAIT: Duration = Duration::from_secs(30);
/// Time inside a waited or fresh critical section.
const SHORT_HOLD: Duration = Duration::from_millis(50);
/// Pause between two of a fresh thread's calls: a call starts within this of any moment,
/// a fault's too.
const FRESH_PAUSE: Duration = Duration::from_millis(100);

/// The lock of `process`'s fresh thread (nobody else takes it: its calls are fresh, not waits).
fn fresh_name(process: usize) -> String {
    format!("{{campaign}}:fresh:{process}")
}

/// What the driver tells a worker, as command-line arguments after `worker`.
pub struct Args {
    pub process: usize,
    pub lock_url: String,
    pub store_url: String,
    pub row: String,
    pub history: PathBuf,
    pub stop_file: PathBuf,
    pub threads: usize,
    pub watchdog: Duration,
    /// `LockManagerBuilder::replica_sync`: off only to show what asynchronous replication does.
    pub replica_sync: bool,
}

impl Args {
    pub fn to_vec(&self) -> Vec<String> {
        vec![
            "worker".into(),
            self.process.to_string(),
            self.lock_url.clone(),
            self.store_url.clone(),
            self.row.clone(),
            self.history.display().to_string(),
            self.stop_file.display().to_string(),
            self.threads.to_string(),
            self.watchdog.as_millis().to_string(),
            self.replica_sync.to_string(),
        ]
    }

    pub fn parse(args: &[String]) -> Option<Args> {
        Some(Args {
            process: args.first()?.parse().ok()?,
            lock_url: args.get(1)?.clone(),
            store_url: args.get(2)?.clone(),
            row: args.get(3)?.clone(),
            history: args.get(4)?.into(),
            stop_file: args.get(5)?.into(),
            threads: args.get(6)?.parse().ok()?,
            watchdog: Duration::from_millis(args.get(7)?.parse().ok()?),
            replica_sync: args.get(8)?.parse().ok()?,
        })
    }
}

/// Runs the worker until the stop file appears (or 15 minutes, whatever happens).
pub fn run(args: Args) {
    let history = Arc::new(Mutex::new(
        File::create(&args.history).expect("history file"),
    ));
    let manager = LockManager::builder(&args.lock_url)
        .watchdog_timeout(args.watchdog)
        .replica_sync(args.replica_sync)
        .build()
        .expect("a lock manager for the deployment");
    // The driver finds this process's holds on the server by its client id.
    let id_line = format!("client {}\n", manager.client_id());
    let _ = history.lock().unwrap().write_all(id_line.as_bytes());
    let deadline = now_ns() + 15 * 60 * 1_000_000_000;
    let args = Arc::new(args);
    let threads: Vec<_> = (0..args.threads)
        .map(|t| {
            let (manager, history, args) = (manager.clone(), history.clone(), args.clone());
            std::thread::spawn(move || {
                let mut thread = Thread::new(&args, t, manager, history);
                let mut short = SHORT_ROUNDS.iter().cycle().skip(t);
                while !args.stop_file.exists() && now_ns() < deadline {
                    thread.round(Kind::Fenced);
                    thread.round(*short.next().expect("a cycle never ends"));
                }
            })
        })
        .collect();
    let long_waits = [Kind::Waited, Kind::Fresh].map(|kind| {
        let (manager, history, args) = (manager.clone(), history.clone(), args.clone());
        std::thread::spawn(move || {
            let mut thread = Thread::new(&args, args.threads + kind as usize, manager, history);
            while !args.stop_file.exists() && now_ns() < deadline {
                thread.round(kind);
                if kind == Kind::Fresh {
                    std::thread::sleep(FRESH_PAUSE);
                }
            }
        })
    });
    for thread in threads.into_iter().chain(long_waits) {
        thread.join().expect("worker thread");
    }
}

/// One worker thread's state.
struct Thread {
    process: usize,
    owner: String,
    manager: LockManager,
    history: Arc<Mutex<File>>,
    store: Store,
}

impl Thread {
    fn new(args: &Args, t: usize, manager: LockManager, history: Arc<Mutex<File>>) -> Self {
        Thread {
            process: args.process,
            owner: format!("{}:{t}", args.process),
            manager,
            history,
            store: Store::new(&args.store_url, &args.row),
        }
    }

    /// One call: the fenced, plain, spin or string lock with a short wait, or one with a long wait: the
    /// waited lock (contended by every process) or the process's own (free: a fresh call).
    fn round(&mut self, kind: Kind) {
        let call_start = now_ns();
        let acquired = match kind {
            Kind::Fenced => self
                .manager
                .acquire(FENCED, AcquireOptions::new().wait(WAIT).fenced(true)),
            Kind::Plain => self.manager.try_lock(PLAIN, WAIT),
            Kind::Spin => self.manager.get_spin_lock(SPIN).try_lock(WAIT),
            Kind::StringLock => self.manager.get_string_lock(STRING).try_lock(WAIT),
            Kind::SpinOnPlain => self.manager.get_spin_lock(PLAIN).try_lock(WAIT),
            Kind::Waited => self.manager.try_lock(WAITED, LONG_WAIT),
            Kind::Fresh => self.manager.try_lock(&fresh_name(self.process), LONG_WAIT),
        };
        self.record_outcome(kind, call_start, acquired);
    }

    fn record_outcome(
        &mut self,
        kind: Kind,
        call_start: u64,
        acquired: redis_rlock::Result<Option<LockGuard>>,
    ) {
        match acquired {
            Ok(Some(guard)) => self.hold(kind, call_start, guard),
            Ok(None) => self.fail(kind, call_start, "timeout".into()),
            Err(err) => {
                self.fail(kind, call_start, format!("error:{err}"));
                // A deployment that is down answers at once: do not spin on it.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn hold(&mut self, kind: Kind, call_start: u64, guard: LockGuard) {
        let acquired = now_ns();
        let token = guard.fencing_token();
        let write = match (kind, token) {
            (Kind::Fenced, Some(token)) => {
                std::thread::sleep(FENCED_WORK);
                self.store.write(token, &self.owner)
            }
            (Kind::Plain | Kind::Spin | Kind::StringLock | Kind::SpinOnPlain, _) => {
                std::thread::sleep(PLAIN_HOLD);
                Write::None
            }
            _ => {
                std::thread::sleep(SHORT_HOLD);
                Write::None
            }
        };
        let lost = guard.is_lost();
        let left = now_ns();
        let end = match guard.unlock() {
            Ok(()) if !lost => End::Held,
            Ok(()) => End::Lost,
            Err(err) if err.is_not_held() => End::Lost,
            Err(_) => End::Unknown,
        };
        let (owner, process) = (self.owner.clone(), self.process);
        self.record(Record::Hold(Hold {
            kind,
            owner,
            process,
            call_start,
            acquired,
            left,
            token,
            write,
            end,
        }));
    }

    fn fail(&self, kind: Kind, call_start: u64, reason: String) {
        let at = now_ns();
        let process = self.process;
        self.record(Record::Fail(Fail {
            kind,
            process,
            call_start,
            at,
            reason,
        }));
    }

    /// One line per record, written at once: a worker killed later keeps what it wrote.
    fn record(&self, record: Record) {
        let line = format!("{record}\n");
        let _ = self.history.lock().unwrap().write_all(line.as_bytes());
    }
}

/// Whether `path`'s worker history exists yet (for the driver).
pub fn history_path(dir: &Path, process: usize) -> PathBuf {
    dir.join(format!("worker-{process}.history"))
}

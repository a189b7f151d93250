//! One row of the campaign: a fresh deployment, worker processes under load, the fault
//! injected and healed (repeatedly in the long mode), everyone stopped, and the checker.

use std::time::{Duration, Instant};

use super::checker::{self, Verdict};
use super::clock::now_ns;
use super::deployment::{Deployment, Topology};
use super::faults::{self, Fault};
use super::history::Record;
use super::netns::Netns;
use super::plan::{past_lease, Mode};
use super::store;
use super::support::RedisServer;
use super::worker::{FENCED, PLAIN, SPIN, STRING};
use super::workers::{Setup, Workers};

/// What the campaign shares between rows.
pub struct Shared<'a> {
    pub mode: &'a Mode,
    pub store: &'a RedisServer,
    pub netns: Option<&'a Netns>,
    /// `--no-replica-sync`: the workers' managers do not wait for replicas.
    pub replica_sync: bool,
}

/// The verdict of a row whose driver panicked (its message is on stderr).
pub const HARNESS_FAILED: &str = "FAILED: the campaign's driver panicked (see stderr)";

pub struct RowResult {
    pub topology: Topology,
    pub fault: Fault,
    pub injected: usize,
    /// The checker's verdict, or why the row did not run.
    pub verdict: Result<Verdict, &'static str>,
    pub seconds: u64,
}

pub fn run_row(shared: &Shared, topology: Topology, fault: Fault, index: usize) -> RowResult {
    let started = Instant::now();
    let (verdict, injected) = match fault.not_run(topology, shared.netns) {
        Some(reason) => (Err(reason), 0),
        None => {
            let (verdict, injected) = load_and_break(shared, topology, fault, index);
            (Ok(verdict), injected)
        }
    };
    RowResult {
        topology,
        fault,
        injected,
        verdict,
        seconds: started.elapsed().as_secs(),
    }
}

fn load_and_break(
    shared: &Shared,
    topology: Topology,
    fault: Fault,
    index: usize,
) -> (Verdict, usize) {
    let mode = shared.mode;
    let mut deployment = Deployment::start(topology, fault, shared.netns);
    let dir = tempfile::Builder::new()
        .prefix("redis-rlock-campaign-")
        .tempdir()
        .expect("temp dir");
    let row = format!("row{index}");
    // CAMPAIGN_KEEP=1 keeps the histories for a closer look.
    let dir = if std::env::var_os("CAMPAIGN_KEEP").is_some() {
        eprintln!("  histories in {}", dir.path().display());
        KeptOrNot::Kept(dir.keep())
    } else {
        KeptOrNot::Temp(dir)
    };
    faults::prepare(fault, &deployment);
    let setup = setup(shared, &deployment, fault, &row);
    let workers = Workers::spawn(&setup, dir.path());
    wait_until_all_acquired(&workers, 0, Duration::from_secs(30));
    std::thread::sleep(mode.warmup);
    let repeats = if fault.repeatable(topology) {
        mode.repeats
    } else {
        1
    };
    let mut times = Vec::new();
    if fault == Fault::Random {
        random_faults(shared, topology, &mut deployment, &workers, &mut times);
    }
    for repeat in (0..repeats).filter(|_| fault != Fault::Random) {
        let (began, healed) = faults::inject(
            fault,
            &mut deployment,
            &workers,
            shared.netns,
            past_lease(mode),
        );
        times.push((began, healed));
        wait_until_all_acquired(&workers, healed, mode.liveness_bound);
        if repeat + 1 < repeats {
            deployment.wait_until_whole();
            std::thread::sleep(mode.warmup);
        }
    }
    // A lease and a bit more of load after the last recovery: holds that a failover left
    // behind (renewed nowhere, or twice) show up within it.
    std::thread::sleep(mode.watchdog + Duration::from_secs(1));
    let mut verdict = stop_and_check(shared, workers, dir.path(), &row, &times);
    // README: "a Redis server that restarts without persistence forgets ... its fencing
    // counters (tokens start again from 1)".
    verdict.tokens_documented = topology == Topology::Single && fault == Fault::Restart;
    verdict.waiters_promised = fault.waiters_promised(topology);
    verdict.leftovers = leftovers(&deployment, mode.watchdog + Duration::from_secs(3));
    (verdict, times.len())
}

/// [`Fault::Random`]: faults drawn from those that leave the deployment whole (and need no
/// namespace), each after a pause drawn up to 5 s once every replica is in sync again (see
/// `Deployment::wait_until_whole`), until [`faults::RANDOM_FOR`] has passed;
/// each one's (began, healed) goes to `times`. The seed is `CAMPAIGN_SEED`, or the clock's;
/// it is printed so that a run can be repeated.
fn random_faults(
    shared: &Shared,
    topology: Topology,
    deployment: &mut Deployment,
    workers: &Workers,
    times: &mut Vec<(u64, u64)>,
) {
    let catalogue: Vec<Fault> = faults::ALL
        .into_iter()
        .filter(|&f| {
            f.applies_to(topology)
                && f.repeatable(topology)
                && f.not_run(topology, None).is_none()
                && !matches!(f, Fault::Random | Fault::ReplicaResync)
        })
        .collect();
    let seed = std::env::var("CAMPAIGN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ns() | 1);
    eprintln!("  random faults: seed {seed} (CAMPAIGN_SEED={seed} repeats the draw)");
    let mut rng = XorShift(seed.max(1));
    let until = Instant::now() + faults::RANDOM_FOR;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(rng.next() % 5_000));
        let fault = catalogue[(rng.next() % catalogue.len() as u64) as usize];
        eprintln!("  random faults: {fault}");
        let (began, healed) =
            faults::inject(fault, deployment, workers, None, past_lease(shared.mode));
        times.push((began, healed));
        wait_until_all_acquired(workers, healed, shared.mode.liveness_bound);
        deployment.wait_until_whole();
    }
}

/// A small seeded generator (xorshift64*): the same seed draws the same faults and pauses.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Stops the workers and runs the checker over their histories and the store's ledger.
fn stop_and_check(
    shared: &Shared,
    workers: Workers,
    dir: &std::path::Path,
    row: &str,
    times: &[(u64, u64)],
) -> Verdict {
    let hung = workers.stop(Duration::from_secs(20));
    // Read after the stop, so that every record written counts (a killed worker's too).
    let histories = read_histories(shared.mode.processes, dir);
    let ledger = store::ledger(&mut shared.store.conn(), row);
    let bound = shared.mode.liveness_bound.as_nanos() as u64;
    let mut verdict = checker::check(&histories, &ledger, times, bound);
    verdict.hung_workers = hung;
    verdict
}

enum KeptOrNot {
    Temp(tempfile::TempDir),
    Kept(std::path::PathBuf),
}

impl KeptOrNot {
    fn path(&self) -> &std::path::Path {
        match self {
            KeptOrNot::Temp(dir) => dir.path(),
            KeptOrNot::Kept(path) => path,
        }
    }
}

fn setup<'a>(shared: &Shared<'a>, deployment: &Deployment, fault: Fault, row: &str) -> Setup<'a> {
    // The worker in the namespace: cut off everything, or next to the cut master.
    let partition = shared
        .netns
        .filter(|_| matches!(fault, Fault::ClientPartition | Fault::MinorityPartition));
    Setup {
        processes: shared.mode.processes,
        threads: shared.mode.threads,
        watchdog: shared.mode.watchdog,
        replica_sync: shared.replica_sync,
        store_url: shared.store.url(),
        row: row.to_string(),
        lock_url: (
            deployment.lock_url(None),
            deployment.lock_url(partition.map(|ns| ns.host_addr()).as_deref()),
        ),
        netns: partition.map(|ns| {
            let store = format!("redis://{}:{}/", ns.host_addr(), shared.store.port());
            (ns, store)
        }),
    }
}

fn read_histories(processes: usize, dir: &std::path::Path) -> Vec<Vec<Record>> {
    (0..processes)
        .map(|p| super::history::read(&super::worker::history_path(dir, p)))
        .collect()
}

/// Waits until every worker process has entered a critical section after `since` (shared
/// clock), or `limit` passed: the checker judges, this only saves time when all is well.
fn wait_until_all_acquired(workers: &Workers, since: u64, limit: Duration) {
    let started = Instant::now();
    while started.elapsed() < limit {
        let all = workers.histories().iter().all(|records| {
            records
                .iter()
                .any(|r| matches!(r, Record::Hold(h) if h.acquired >= since))
        });
        if all {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// After every worker stopped: lock keys still there after `limit`, plus keys without a TTL
/// other than the fencing counters (which Redisson keeps for good), on every master.
fn leftovers(deployment: &Deployment, limit: Duration) -> usize {
    let deadline = now_ns() + limit.as_nanos() as u64;
    loop {
        let found: usize = deployment.masters_now().into_iter().map(keys_left).sum();
        if found == 0 || now_ns() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn keys_left(port: u16) -> usize {
    let url = format!("redis://{}:{port}/", super::support::host_of(port));
    let Ok(mut conn) = super::support::connect(&url) else {
        return 0;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut conn)
        .unwrap_or_default();
    keys.iter()
        .filter(|key| {
            if [FENCED, PLAIN, SPIN, STRING].contains(&key.as_str()) {
                return true;
            }
            let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap_or(-2);
            ttl == -1 && !key.starts_with("redisson_lock_token:")
        })
        .count()
}

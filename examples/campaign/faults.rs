//! The faults, where each applies, and how each is injected and healed. A fault returns the
//! shared-clock times it began and healed: the checker measures recovery from the heal.

use std::fmt;
use std::time::Duration;

use super::clock::now_ns;
use super::deployment::{Deployment, Topology};
use super::netns::Netns;
use super::support::cluster::RedisCluster;
use super::support::host_of;
use super::support::sentinel::replication_says;
use super::worker::{FENCED, PLAIN};
use super::workers::Workers;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the single server and a start on the same port (empty, or from its AOF).
    Restart,
    /// SIGSTOP of a worker process past its lease, then SIGCONT: a GC pause.
    ClientStop,
    /// `SENTINEL FAILOVER`: the master is demoted while it runs.
    SentinelFailover,
    /// `CLUSTER FAILOVER` on the replica of the locks' master.
    ClusterFailover,
    /// SIGKILL of the locks' master, which stays dead; the deployment promotes a replica.
    KillMaster,
    /// SIGSTOP of the locks' master past the failure timeout, SIGCONT after the failover: a
    /// stale master comes back (on a single server: a stall past the lease).
    StaleMaster,
    /// A worker process in a network namespace loses its link past its lease.
    ClientPartition,
    /// The locks' master, running in a network namespace, cut off everyone (clients,
    /// replicas, sentinels, cluster peers) past the lease and until a replica is promoted,
    /// then joined again (on a single server: cut off its clients past the lease).
    NodePartition,
    /// [`NodePartition`](Fault::NodePartition) with worker 0 inside the namespace, next to the
    /// cut master: a client on the minority side, which still reaches the old master.
    MinorityPartition,
    /// The locks' slot moves to another master while workers use it.
    SlotMigration,
    /// SIGSTOP of the locks' master for [`FROZEN_FOR`], well past its replica's promotion,
    /// then SIGCONT: the manager must follow the promotion while the old master hangs.
    FrozenMaster,
    /// The replicas in a full resync (forced, and held back by `repl-diskless-sync-delay`, so
    /// the master lists them in `wait_bgsave`) from before the workers start, as after a
    /// replica restart, and the master killed during it: what the master took while they were
    /// syncing must not count.
    ReplicaResync,
    /// Faults drawn at random from the catalogue, at random moments, for [`RANDOM_FOR`]
    /// (seeded: `CAMPAIGN_SEED` repeats a run; the seed is printed).
    Random,
}

/// How long a frozen master stays stopped (the repro stopped it 20 s).
pub const FROZEN_FOR: Duration = Duration::from_secs(20);
/// How long the random row draws faults.
pub const RANDOM_FOR: Duration = Duration::from_secs(150);

pub const ALL: [Fault; 13] = [
    Fault::Restart,
    Fault::ClientStop,
    Fault::SentinelFailover,
    Fault::ClusterFailover,
    Fault::KillMaster,
    Fault::StaleMaster,
    Fault::ClientPartition,
    Fault::NodePartition,
    Fault::MinorityPartition,
    Fault::SlotMigration,
    Fault::FrozenMaster,
    Fault::ReplicaResync,
    Fault::Random,
];

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Restart => "restart",
            Fault::ClientStop => "SIGSTOP client",
            Fault::SentinelFailover => "SENTINEL FAILOVER",
            Fault::ClusterFailover => "CLUSTER FAILOVER",
            Fault::KillMaster => "kill -9 master",
            Fault::StaleMaster => "SIGSTOP master",
            Fault::ClientPartition => "partition client",
            Fault::NodePartition => "partition node",
            Fault::MinorityPartition => "partition node+client",
            Fault::SlotMigration => "slot migration",
            Fault::FrozenMaster => "SIGSTOP master 20 s",
            Fault::ReplicaResync => "replicas resyncing, kill -9 master",
            Fault::Random => "random faults",
        })
    }
}

impl Fault {
    /// Whether the fault means something on `topology` (a row is printed only then).
    pub fn applies_to(self, topology: Topology) -> bool {
        let single = matches!(topology, Topology::Single | Topology::SingleAof);
        let sentinel = matches!(topology, Topology::Sentinel1 | Topology::Sentinel2);
        let cluster = topology == Topology::Cluster;
        match self {
            Fault::ClientStop
            | Fault::StaleMaster
            | Fault::NodePartition
            | Fault::ClientPartition => true,
            Fault::Restart => single,
            Fault::MinorityPartition => !single,
            Fault::SentinelFailover => sentinel,
            Fault::ClusterFailover | Fault::SlotMigration => cluster,
            Fault::KillMaster | Fault::FrozenMaster => sentinel || cluster,
            Fault::ReplicaResync => sentinel,
            Fault::Random => topology == Topology::Sentinel2 || cluster,
        }
    }

    /// Whether the README promises that a waiter rides this fault out within its wait: a
    /// failover (or a master that hangs) on Sentinel or Cluster. Not a client cut off or
    /// stopped, nor one server down (one connect timeout of grace there).
    pub fn waiters_promised(self, topology: Topology) -> bool {
        let single = matches!(topology, Topology::Single | Topology::SingleAof);
        !single
            && !matches!(
                self,
                Fault::ClientStop | Fault::ClientPartition | Fault::MinorityPartition
            )
    }

    /// Whether the deployment is whole again after it, so that it can be injected again.
    /// After a node partition with a failover the master is no longer the node in the
    /// namespace, so it runs once there.
    pub fn repeatable(self, topology: Topology) -> bool {
        let single = matches!(topology, Topology::Single | Topology::SingleAof);
        match self {
            Fault::KillMaster | Fault::ReplicaResync | Fault::Random => false,
            Fault::NodePartition => single,
            Fault::MinorityPartition => false,
            _ => true,
        }
    }

    /// Why the fault cannot run here, if it cannot.
    pub fn not_run(self, topology: Topology, netns: Option<&Netns>) -> Option<&'static str> {
        match self {
            Fault::ClientPartition | Fault::NodePartition | Fault::MinorityPartition
                if netns.is_none() =>
            {
                Some("not run (no netns)")
            }
            _ if !self.applies_to(topology) => Some("n/a"),
            _ => None,
        }
    }
}

/// Injects `fault` and heals it; returns (began, healed) on the shared clock.
pub fn inject(
    fault: Fault,
    deployment: &mut Deployment,
    workers: &Workers,
    netns: Option<&Netns>,
    past_lease: Duration,
) -> (u64, u64) {
    let began = now_ns();
    if fault == Fault::MinorityPartition {
        // Cut while the worker next to the master holds a lock there.
        await_hold_of_worker_0(deployment, workers);
    }
    match (fault, deployment) {
        (Fault::Restart, Deployment::Single(server, _)) => server.restart(),
        (Fault::ClientStop, deployment) => {
            await_hold_of_worker_0(deployment, workers);
            workers.pause(0);
            std::thread::sleep(past_lease);
            workers.resume(0);
        }
        (Fault::ClientPartition, deployment) => {
            let ns = netns.expect("a namespace for the partition");
            await_hold_of_worker_0(deployment, workers);
            ns.cut();
            std::thread::sleep(past_lease);
            ns.heal();
        }
        (Fault::NodePartition, Deployment::Single(..)) => {
            let ns = netns.expect("a namespace for the partition");
            ns.cut();
            std::thread::sleep(past_lease);
            ns.heal();
        }
        (Fault::NodePartition | Fault::MinorityPartition, Deployment::Sentinel(sentinel)) => {
            let ns = netns.expect("a namespace for the partition");

            let old = sentinel.master_port();
            assert_eq!(
                host_of(old),
                ns.inside_addr(),
                "the master is the one inside"
            );
            let cut = now_ns();
            ns.cut();
            let new = sentinel.wait_for_failover(old);
            let promoted = now_ns();
            sleep_until(cut + past_lease.as_nanos() as u64);
            ns.heal();
            let healed = now_ns();
            sentinel.wait_for_demotion(old);
            eprintln!(
                "  {fault}: master {old} cut off, {new} promoted {:.1} s later, link back at \
                 {:.1} s, {old} demoted {:.1} s after that",
                (promoted - cut) as f64 / 1e9,
                (healed - cut) as f64 / 1e9,
                (now_ns() - healed) as f64 / 1e9
            );
        }
        (Fault::NodePartition | Fault::MinorityPartition, Deployment::Cluster(cluster)) => {
            let ns = netns.expect("a namespace for the partition");
            let master = cluster.master_for_slot(RedisCluster::slot_of(FENCED));
            assert_eq!(
                host_of(master),
                ns.inside_addr(),
                "the master is the one inside"
            );
            // Asked before the cut: the cluster helpers ask every node, the cut one too.
            let replica = replica_now(master);
            let cut = now_ns();
            ns.cut();
            let deadline = cut + 60_000_000_000;
            while !replication_says(replica, "role:master") && now_ns() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let promoted = now_ns();
            sleep_until(cut + past_lease.as_nanos() as u64);
            ns.heal();
            let deadline = now_ns() + 60_000_000_000;
            while !replication_says(master, "role:slave") && now_ns() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            cluster.wait_until_ok();
            eprintln!(
                "  {fault}: master {master} cut off, {replica} promoted {:.1} s later",
                (promoted - cut) as f64 / 1e9
            );
        }
        (Fault::StaleMaster, Deployment::Single(server, _)) => {
            server.freeze();
            std::thread::sleep(past_lease);
            server.thaw();
        }
        (_, Deployment::Sentinel(sentinel)) => sentinel_fault(fault, sentinel),
        (_, Deployment::Cluster(cluster)) => cluster_fault(fault, cluster),
        (fault, _) => panic!("{fault} does not apply to this deployment"),
    }
    (began, now_ns())
}

fn sleep_until(at: u64) {
    let now = now_ns();
    if at > now {
        std::thread::sleep(Duration::from_nanos(at - now));
    }
}

/// Waits (up to 5 s) until worker 0 holds one of the locks, so that a pause or partition
/// of it lands inside a critical section: the case fencing and the lost signal are for.
fn await_hold_of_worker_0(deployment: &Deployment, workers: &Workers) {
    let Some(id) = workers.client_id(0) else {
        return;
    };
    let mut conns: Vec<redis::Connection> = deployment
        .masters_now()
        .into_iter()
        .filter_map(|port| {
            super::support::connect(&format!("redis://{}:{port}/", host_of(port))).ok()
        })
        .collect();
    let deadline = now_ns() + 5_000_000_000;
    while now_ns() < deadline {
        for conn in &mut conns {
            for name in [FENCED, PLAIN] {
                let owners: Vec<String> = redis::cmd("HKEYS")
                    .arg(name)
                    .query(conn)
                    .unwrap_or_default();
                if owners.iter().any(|o| o.starts_with(&id)) {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn sentinel_fault(fault: Fault, sentinel: &super::support::sentinel::RedisSentinel) {
    let old = match fault {
        Fault::SentinelFailover => {
            let old = sentinel.graceful_failover();
            sentinel.wait_for_failover(old);
            sentinel.wait_for_demotion(old);
            old
        }
        Fault::KillMaster => {
            let old = sentinel.kill_master();
            sentinel.wait_for_failover(old);
            old
        }
        Fault::StaleMaster => {
            let old = sentinel.master_port();
            sentinel.pause(old);
            sentinel.wait_for_failover(old);
            sentinel.resume(old);
            sentinel.wait_for_demotion(old);
            old
        }
        Fault::FrozenMaster => {
            let old = sentinel.master_port();
            let stopped = now_ns();
            sentinel.pause(old);
            sentinel.wait_for_failover(old);
            let promoted = now_ns();
            sleep_until(stopped + FROZEN_FOR.as_nanos() as u64);
            sentinel.resume(old);
            sentinel.wait_for_demotion(old);
            eprintln!(
                "  {fault}: promoted {:.1} s after the stop",
                (promoted - stopped) as f64 / 1e9
            );
            old
        }
        Fault::ReplicaResync => replica_resync_then_kill(sentinel),
        other => panic!("{other} does not apply to Sentinel"),
    };
    // For reading the examples the checker prints: which server served when.
    eprintln!(
        "  {fault}: master {old} before, {} after",
        sentinel.master_port()
    );
}

fn cluster_fault(fault: Fault, cluster: &RedisCluster) {
    let slot = RedisCluster::slot_of(FENCED);
    let master = cluster.master_for_slot(slot);
    match fault {
        Fault::ClusterFailover => cluster.failover(replica_now(master)),
        Fault::KillMaster => {
            cluster.kill(master);
            cluster.wait_for_new_master_of_slot(slot, master);
        }
        Fault::StaleMaster | Fault::FrozenMaster => {
            // Asks the replica itself: the cluster helpers ask every node, and a stopped one
            // may not even accept a connection (its backlog full of the workers' attempts).
            let replica = replica_now(master);
            let stopped = now_ns();
            cluster.pause(master);
            let promoted = || replication_says(replica, "role:master");
            let deadline = now_ns() + 60_000_000_000;
            while !promoted() && now_ns() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if fault == Fault::FrozenMaster {
                eprintln!(
                    "  {fault}: promoted {:.1} s after the stop",
                    (now_ns() - stopped) as f64 / 1e9
                );
                sleep_until(stopped + FROZEN_FOR.as_nanos() as u64);
            }
            cluster.resume(master);
            cluster.wait_until_ok();
        }
        Fault::SlotMigration => {
            // A master now: after an earlier fault of a random row, one of those the cluster
            // was made with may be a replica.
            let to = cluster
                .masters_now()
                .into_iter()
                .find(|&p| p != master)
                .expect("another master");
            cluster.begin_reshard(slot, to);
            // Workers meet the slot half-way (ASK, TRYAGAIN) for a while.
            std::thread::sleep(Duration::from_secs(1));
            cluster.finish_reshard(slot, to);
        }
        other => panic!("{other} does not apply to a cluster"),
    }
}

/// The replica that follows `master` now (after a failover it is the former master).
fn replica_now(master: u16) -> u16 {
    let mut conn = super::support::connect(&format!("redis://{}:{master}/", host_of(master)))
        .expect("the master answers");
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .expect("INFO replication");
    info.lines()
        .filter(|l| l.starts_with("slave0:"))
        .find_map(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
        .and_then(|p| p.parse().ok())
        .expect("the master has a replica")
}

/// Before the workers start, for [`Fault::ReplicaResync`]: the replicas' links dropped and a
/// full resync forced (a new replication id on the master, as after a replica restart whose
/// backlog ran out), held back 30 s by `repl-diskless-sync-delay`: the master lists its
/// replicas in `wait_bgsave` (its `ROLE` lists none), and they keep their data. The workers'
/// managers then start while the replicas sync, as a manager meets a replica just added or
/// restarted. The sentinels' down-after goes to 3 s, so that a replica whose link has been
/// down that long may still be promoted (ten down-after periods).
pub fn prepare(fault: Fault, deployment: &Deployment) {
    let (Fault::ReplicaResync, Deployment::Sentinel(sentinel)) = (fault, deployment) else {
        return;
    };
    for url in sentinel.sentinel_urls() {
        let mut conn = super::support::connect(&url).expect("a sentinel answers");
        redis::cmd("SENTINEL")
            .arg("SET")
            .arg(sentinel.master_name())
            .arg("down-after-milliseconds")
            .arg("3000")
            .query::<()>(&mut conn)
            .expect("SENTINEL SET");
    }
    let master = sentinel.master_port();
    let mut conn = super::support::connect(&format!("redis://{}:{master}/", host_of(master)))
        .expect("the master answers");
    let mut run =
        |cmd: &mut redis::Cmd| cmd.query::<redis::Value>(&mut conn).expect("on the master");
    run(redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-diskless-sync")
        .arg("yes"));
    run(redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-diskless-sync-delay")
        .arg("30"));
    run(redis::cmd("DEBUG").arg("CHANGE-REPL-ID"));
    run(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"));
    let deadline = now_ns() + 10_000_000_000;
    while !replication_says(master, "state=wait_bgsave") && now_ns() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("  replicas of {master} in wait_bgsave (links dropped, full resync held back 30 s)");
}

/// [`Fault::ReplicaResync`], its replicas still in `wait_bgsave` (see [`prepare`]): the
/// master killed; what it took since reached no replica. Returns the old master.
fn replica_resync_then_kill(sentinel: &super::support::sentinel::RedisSentinel) -> u16 {
    let still = replication_says(sentinel.master_port(), "state=wait_bgsave");
    let old = sentinel.kill_master();
    eprintln!("  master {old} killed, its replicas still in wait_bgsave: {still}");
    sentinel.wait_for_failover(old);
    old
}

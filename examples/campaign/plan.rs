//! Which faults run on which topology, and how long and how hard, in each mode. The short
//! mode (CI) runs a subset with one injection each; the long mode runs every fault that
//! applies, repeated, with more workers.

use std::time::Duration;

use super::deployment::Topology;
use super::faults::{Fault, ALL};

pub struct Mode {
    pub name: &'static str,
    pub processes: usize,
    pub threads: usize,
    /// Load before the first fault and between repeats.
    pub warmup: Duration,
    /// Injections per row (once for faults the deployment does not come back from).
    pub repeats: usize,
    /// The workers' watchdog timeout: their lease.
    pub watchdog: Duration,
    /// Every process must acquire again within this after each heal.
    pub liveness_bound: Duration,
}

pub const SHORT: Mode = Mode {
    name: "short",
    processes: 3,
    threads: 2,
    warmup: Duration::from_secs(2),
    repeats: 1,
    watchdog: Duration::from_secs(3),
    liveness_bound: Duration::from_secs(20),
};

pub const LONG: Mode = Mode {
    name: "long",
    processes: 4,
    threads: 3,
    warmup: Duration::from_secs(8),
    repeats: 3,
    watchdog: Duration::from_secs(3),
    liveness_bound: Duration::from_secs(20),
};

const TOPOLOGIES: [Topology; 5] = [
    Topology::Single,
    Topology::SingleAof,
    Topology::Sentinel1,
    Topology::Sentinel2,
    Topology::Cluster,
];

/// The short mode's rows: what CI can afford in about five minutes.
const SHORT_ROWS: [(Topology, Fault); 13] = [
    (Topology::Single, Fault::Restart),
    (Topology::Single, Fault::ClientStop),
    (Topology::Single, Fault::ClientPartition),
    (Topology::SingleAof, Fault::Restart),
    (Topology::Sentinel1, Fault::SentinelFailover),
    (Topology::Sentinel1, Fault::KillMaster),
    (Topology::Sentinel2, Fault::SentinelFailover),
    (Topology::Sentinel2, Fault::KillMaster),
    (Topology::Cluster, Fault::ClusterFailover),
    (Topology::Cluster, Fault::KillMaster),
    (Topology::Cluster, Fault::SlotMigration),
    // About 20 s: the cluster fails over within 5 s of the cut (Sentinel takes 20 s more to
    // demote the old master when it returns, too long for CI).
    (Topology::Cluster, Fault::NodePartition),
    // About 40 s: a master that hangs 20 s, with waiters and fresh calls counted (its
    // replica is promoted within 5 s; the stale-master rows' demotion is what costs time).
    (Topology::Cluster, Fault::FrozenMaster),
];

/// The rows of `mode`: every applicable pair in the long mode.
pub fn rows(mode: &Mode) -> Vec<(Topology, Fault)> {
    if mode.name == SHORT.name {
        return SHORT_ROWS.to_vec();
    }
    TOPOLOGIES
        .iter()
        .flat_map(|&t| {
            ALL.iter()
                .filter(move |f| f.applies_to(t))
                .map(move |&f| (t, f))
        })
        .collect()
}

/// How long a fault keeps a client or server away: past the lease, with a second to spare.
pub fn past_lease(mode: &Mode) -> Duration {
    mode.watchdog * 2 + Duration::from_secs(1)
}

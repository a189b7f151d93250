//! The topologies a campaign runs, each made of testkit's launchers, and what the
//! driver asks of them: the URL workers lock through and the masters to look at afterwards.

use std::fmt;

use super::faults::Fault;
use super::netns::Netns;
use super::support::sentinel::{replication_says, RedisSentinel};
use super::support::{cluster::RedisCluster, host_of, RedisServer};
use super::worker::FENCED;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One server without persistence.
    Single,
    /// One server with an append-only file, `appendfsync always` (the README's advice for
    /// fencing across restarts).
    SingleAof,
    /// A master, one replica, three sentinels.
    Sentinel1,
    /// A master, two replicas, three sentinels.
    Sentinel2,
    /// Three masters with a replica each.
    Cluster,
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Topology::Single => "single",
            Topology::SingleAof => "single+AOF",
            Topology::Sentinel1 => "sentinel, 1 replica",
            Topology::Sentinel2 => "sentinel, 2 replicas",
            Topology::Cluster => "cluster 3+3",
        })
    }
}

pub enum Deployment {
    /// The server, and the address it also listens on inside the campaign's veth pair (when
    /// there is one) for workers in the network namespace.
    Single(RedisServer, Option<String>),
    Sentinel(RedisSentinel),
    Cluster(RedisCluster),
}

impl Deployment {
    /// A fresh deployment of `topology` for a row of `fault`. With a namespace: for a client
    /// partition every server (and sentinel) also listens on, and announces, our end of the
    /// veth pair, which the worker inside reaches; for a node partition the locks' master
    /// runs inside the namespace and everything else announces our end.
    pub fn start(topology: Topology, fault: Fault, netns: Option<&Netns>) -> Self {
        let client = netns.filter(|_| fault == Fault::ClientPartition);
        let node =
            netns.filter(|_| matches!(fault, Fault::NodePartition | Fault::MinorityPartition));
        let network = client.or(node).map(|ns| ns.network(node.is_some()));
        let mut args: Vec<String> = Vec::new();
        if let Some(ns) = client {
            // Protected mode refuses clients off loopback without a password; the veth pair
            // is this campaign's own link, reachable only from its namespace.
            args.extend(["--bind".into(), "127.0.0.1".into(), ns.host_addr()]);
            args.extend(["--protected-mode".into(), "no".into()]);
        }
        if topology == Topology::SingleAof {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match (topology, network) {
            (Topology::Single | Topology::SingleAof, _) => match node {
                Some(ns) => {
                    let place = ns.network(true).node();
                    Deployment::Single(RedisServer::start_placed(&args, u16::MAX, place), None)
                }
                None => {
                    Deployment::Single(RedisServer::start_with(&args), client.map(Netns::host_addr))
                }
            },
            (Topology::Sentinel1, None) => Deployment::Sentinel(RedisSentinel::with_replicas(1)),
            (Topology::Sentinel2, None) => Deployment::Sentinel(RedisSentinel::with_replicas(2)),
            (Topology::Sentinel1, Some(net)) => {
                Deployment::Sentinel(RedisSentinel::with_network(1, &net))
            }
            (Topology::Sentinel2, Some(net)) => {
                Deployment::Sentinel(RedisSentinel::with_network(2, &net))
            }
            (Topology::Cluster, None) => Deployment::Cluster(RedisCluster::start()),
            (Topology::Cluster, Some(net)) => {
                let cluster = RedisCluster::with_network(&net);
                if let Some(ns) = node {
                    give_locks_slot_to(&cluster, &ns.inside_addr());
                }
                Deployment::Cluster(cluster)
            }
        }
    }

    /// The URL a worker builds its manager from; `via`: our end of the veth pair, for a
    /// worker inside the network namespace, which reaches the servers by it.
    pub fn lock_url(&self, via: Option<&str>) -> String {
        // A server in the namespace is reached by its own address from both sides.
        let host = |port: u16| match via {
            Some(addr) if host_of(port) == "127.0.0.1" => format!("{addr}:{port}"),
            _ => format!("{}:{port}", host_of(port)),
        };
        match self {
            Deployment::Single(server, Some(addr)) if via.is_some() => {
                format!("redis://{addr}:{}/", server.port())
            }
            Deployment::Single(server, _) => server.url(),
            Deployment::Sentinel(sentinel) => {
                let hosts: Vec<String> = sentinel
                    .sentinel_urls()
                    .iter()
                    .filter_map(|u| u.rsplit(':').next()?.trim_end_matches('/').parse().ok())
                    .map(host)
                    .collect();
                let master = sentinel.master_name();
                format!("redis-sentinel://{}/0#{master}", hosts.join(","))
            }
            Deployment::Cluster(cluster) => {
                let hosts: Vec<String> = cluster.master_ports().into_iter().map(host).collect();
                format!("redis-cluster://{}", hosts.join(","))
            }
        }
    }

    /// Waits (up to 60 s) until every replica's link to its master is up: a replica still in
    /// its full sync (a stale master just demoted) cannot be promoted, so a fault on its
    /// master injected meanwhile would meet no failover.
    pub fn wait_until_whole(&self) {
        let replicas: Vec<u16> = match self {
            Deployment::Single(..) => Vec::new(),
            Deployment::Sentinel(sentinel) => sentinel.replica_ports(),
            Deployment::Cluster(cluster) => cluster
                .seed_urls()
                .iter()
                .filter_map(|url| url.rsplit(':').next()?.trim_end_matches('/').parse().ok())
                .filter(|&port| replication_says(port, "role:slave"))
                .collect(),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        for replica in replicas {
            while !replication_says(replica, "master_link_status:up")
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }

    /// The ports of the servers that are masters now: where leftover keys would be.
    pub fn masters_now(&self) -> Vec<u16> {
        match self {
            Deployment::Single(server, _) => vec![server.port()],
            Deployment::Sentinel(sentinel) => vec![sentinel.master_port()],
            Deployment::Cluster(cluster) => cluster
                .seed_urls()
                .iter()
                .filter_map(|url| url.rsplit(':').next()?.trim_end_matches('/').parse().ok())
                .filter(|&port| replication_says(port, "role:master"))
                .collect(),
        }
    }
}

/// Makes the node in the namespace (at `inside`) the master of the locks' slot before any
/// worker starts: promoted if `redis-cli` made it a replica, then given the (empty) slot.
fn give_locks_slot_to(cluster: &RedisCluster, inside: &str) {
    let slot = RedisCluster::slot_of(FENCED);
    let node = cluster
        .seed_urls()
        .iter()
        .filter_map(|url| url.rsplit(':').next()?.trim_end_matches('/').parse().ok())
        .find(|&port: &u16| host_of(port) == inside)
        .expect("a node in the namespace");
    if !replication_says(node, "role:master") {
        cluster.failover(node);
    }
    if cluster.master_for_slot(slot) != node {
        cluster.begin_reshard(slot, node);
        cluster.finish_reshard(slot, node);
    }
    cluster.wait_until_ok();
}

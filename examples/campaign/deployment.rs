//! The topologies a campaign runs, each made of tests/support's launchers, and what the
//! driver asks of them: the URL workers lock through and the masters to look at afterwards.

use std::fmt;

use super::netns::Netns;
use super::support::sentinel::{replication_says, RedisSentinel};
use super::support::{cluster::RedisCluster, RedisServer};

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
    pub fn start(topology: Topology, netns: Option<&Netns>) -> Self {
        let mut args: Vec<String> = Vec::new();
        if let Some(ns) = netns {
            // Protected mode refuses clients off loopback without a password; the veth pair
            // is this campaign's own link, reachable only from its namespace.
            args.extend(["--bind".into(), "127.0.0.1".into(), ns.host_addr()]);
            args.extend(["--protected-mode".into(), "no".into()]);
        }
        if topology == Topology::SingleAof {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match topology {
            Topology::Single | Topology::SingleAof => {
                Deployment::Single(RedisServer::start_with(&args), netns.map(Netns::host_addr))
            }
            Topology::Sentinel1 => Deployment::Sentinel(RedisSentinel::with_replicas(1)),
            Topology::Sentinel2 => Deployment::Sentinel(RedisSentinel::with_replicas(2)),
            Topology::Cluster => Deployment::Cluster(RedisCluster::start()),
        }
    }

    /// The URL a worker builds its manager from; `partitioned` for a worker inside the
    /// network namespace, which reaches the server by its veth address.
    pub fn lock_url(&self, partitioned: bool) -> String {
        match self {
            Deployment::Single(server, Some(addr)) if partitioned => {
                format!("redis://{addr}:{}/", server.port())
            }
            Deployment::Single(server, _) => server.url(),
            Deployment::Sentinel(sentinel) => {
                let hosts: Vec<String> = sentinel
                    .sentinel_urls()
                    .iter()
                    .map(|u| {
                        u.trim_start_matches("redis://")
                            .trim_end_matches('/')
                            .into()
                    })
                    .collect();
                let master = sentinel.master_name();
                format!("redis-sentinel://{}/0#{master}", hosts.join(","))
            }
            Deployment::Cluster(cluster) => cluster.url(),
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

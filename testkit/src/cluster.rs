//! A real Redis Cluster for tests: 3 masters and 3 replicas of the selected server (Debian's
//! `redis-server` unless `REDIS_RLOCK_SERVER` says otherwise), made with `redis-cli --cluster
//! create` (or `REDIS_RLOCK_CLI`'s binary), on free loopback ports below 55535 (each node's cluster
//! bus listens on its port + 10000). Killed with the value.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Network, RedisServer};

/// How long the cluster may take to form or to fail over.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct RedisCluster {
    /// By port; a killed node is gone from here.
    nodes: Mutex<HashMap<u16, RedisServer>>,
    masters: Vec<u16>,
    replicas: HashMap<u16, u16>,
}

fn conn(port: u16) -> redis::Connection {
    let conn = super::connect(&format!("redis://{}:{port}/", super::host_of(port)))
        .expect("connection to a cluster node");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    conn
}

fn info(port: u16, section: &str) -> String {
    super::query(&mut conn(port), redis::cmd("INFO").arg(section)).unwrap_or_default()
}

fn cluster_ok(port: u16) -> bool {
    let state: String =
        super::query(&mut conn(port), redis::cmd("CLUSTER").arg("INFO")).unwrap_or_default();
    state.contains("cluster_state:ok") && state.contains("cluster_slots_assigned:16384")
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < SETTLE_TIMEOUT,
            "the cluster never {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn node_id(port: u16) -> String {
    super::query(&mut conn(port), redis::cmd("CLUSTER").arg("MYID")).expect("CLUSTER MYID")
}

impl RedisCluster {
    /// Starts six nodes, joins them as 3 masters with a replica each, and waits until every
    /// node sees all slots served and every replica is in sync.
    pub fn start() -> Self {
        Self::start_on(None, &[])
    }

    /// [`start`](Self::start) with `extra_args` on every node's command line
    /// (`["--cluster-databases", "16"]` for Valkey 9's numbered databases).
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::start_on(None, extra_args)
    }

    /// [`start`](Self::start) reached off loopback (opt-in, see [`Network`]): every node
    /// binds and announces (`cluster-announce-ip`) `network.host_addr`, except the first,
    /// which runs in `network.netns` when given, on its address. `redis-cli` places one
    /// master per address first, so that node is a master (of slots 0-5460).
    pub fn with_network(network: &Network) -> Self {
        Self::start_on(Some(network), &[])
    }

    fn start_on(network: Option<&Network>, extra_args: &[&str]) -> Self {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ];
        args.extend_from_slice(extra_args);
        let servers: Vec<RedisServer> = (0..6)
            .map(|i| match network {
                None => RedisServer::start_below(&args, 55535),
                Some(net) => {
                    let place = if i == 0 { net.node() } else { net.here() };
                    let mut placed = args.to_vec();
                    placed.extend(["--cluster-announce-ip", place.addr.as_str()]);
                    RedisServer::start_placed(&placed, 55535, place.clone())
                }
            })
            .collect();
        let ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
        let cli = super::cli_binary();
        let mut create = Command::new(&cli);
        create.arg("--cluster").arg("create");
        for (i, port) in ports.iter().enumerate() {
            let host = match network {
                None => "127.0.0.1".to_string(),
                Some(net) if i == 0 => net.node().addr,
                Some(net) => net.host_addr.clone(),
            };
            create.arg(format!("{host}:{port}"));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("run {cli} --cluster create: {e}"));
        assert!(
            out.status.success(),
            "{cli} --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for &port in &ports {
            wait_for("formed", || cluster_ok(port));
        }
        let mut masters = Vec::new();
        let mut replicas = HashMap::new();
        for &port in &ports {
            let replication = info(port, "replication");
            if replication.contains("role:master") {
                masters.push(port);
            } else {
                let master_port = replication
                    .lines()
                    .find_map(|l| l.strip_prefix("master_port:"))
                    .and_then(|p| p.trim().parse().ok())
                    .expect("a replica's master port");
                replicas.insert(master_port, port);
                wait_for("synced its replicas", || {
                    info(port, "replication").contains("master_link_status:up")
                });
            }
        }
        masters.sort_unstable();
        for &master in &masters {
            wait_for("listed each master's replica as online", || {
                super::role_lists_replicas(&mut conn(master)) == 1
            });
        }
        assert_eq!(masters.len(), 3, "three masters");
        assert_eq!(replicas.len(), 3, "a replica for each master");
        let nodes = servers.into_iter().map(|s| (s.port(), s)).collect();
        RedisCluster {
            nodes: Mutex::new(nodes),
            masters,
            replicas,
        }
    }

    /// `redis://127.0.0.1:<port>/` of every node.
    pub fn seed_urls(&self) -> Vec<String> {
        let mut ports: Vec<u16> = self.nodes.lock().unwrap().keys().copied().collect();
        ports.sort_unstable();
        ports
            .into_iter()
            .map(|port| format!("redis://{}:{port}/", super::host_of(port)))
            .collect()
    }

    /// `redis-cluster://` and the masters the cluster was made with: this crate's URL form.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .masters
            .iter()
            .map(|port| format!("{}:{port}", super::host_of(*port)))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }

    /// The masters when the cluster was made.
    pub fn master_ports(&self) -> Vec<u16> {
        self.masters.clone()
    }

    /// The replica a master had when the cluster was made.
    pub fn replica_of(&self, master: u16) -> u16 {
        self.replicas[&master]
    }

    /// The slot of `key` (as `CLUSTER KEYSLOT` says).
    pub fn slot_of(key: &str) -> u16 {
        slot(key.as_bytes())
    }

    /// The port of the master that serves `slot` now, asked from a live node.
    pub fn master_for_slot(&self, slot: u16) -> u16 {
        let ports: Vec<u16> = self.nodes.lock().unwrap().keys().copied().collect();
        for port in ports {
            let Ok(redis::Value::Array(ranges)) = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query::<redis::Value>(&mut conn(port))
            else {
                continue;
            };
            for range in ranges {
                let redis::Value::Array(items) = range else {
                    continue;
                };
                let int = |v: Option<&redis::Value>| match v {
                    Some(redis::Value::Int(n)) => *n,
                    _ => -1,
                };
                let (start, end) = (int(items.first()), int(items.get(1)));
                if !(start..=end).contains(&i64::from(slot)) {
                    continue;
                }
                if let Some(redis::Value::Array(node)) = items.get(2) {
                    return int(node.get(1)) as u16;
                }
            }
        }
        panic!("no live node knows the master of slot {slot}");
    }

    /// `CLUSTER FAILOVER` on `replica`; returns once it is the master and the cluster is ok.
    /// A manual failover that does not complete within 5 s is dropped by Redis (a loaded
    /// machine): it is asked again, three times at most.
    pub fn failover(&self, replica: u16) {
        let promoted = || info(replica, "replication").contains("role:master");
        for _ in 0..3 {
            // Sent once: a repeat would restart a failover under way. An interrupted reply
            // (see `super::connect`) says nothing, and the loop looks at the replica's role.
            let asked: redis::RedisResult<()> = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query(&mut conn(replica));
            if let Err(err) = asked {
                assert!(super::interrupted(&err), "CLUSTER FAILOVER: {err}");
            }
            let asked = Instant::now();
            while !promoted() && asked.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if promoted() {
                self.wait_until_ok();
                return;
            }
        }
        panic!("the replica {replica} was never promoted by CLUSTER FAILOVER");
    }

    /// Whether the node at `port` says it is a master (asked of that node only: a stopped
    /// node elsewhere costs nothing).
    pub fn is_master(&self, port: u16) -> bool {
        info(port, "replication").contains("role:master")
    }

    /// SIGKILL of a node.
    pub fn kill(&self, port: u16) {
        if let Some(mut node) = self.nodes.lock().unwrap().remove(&port) {
            node.kill();
        }
    }

    /// SIGSTOP of a node.
    pub fn pause(&self, port: u16) {
        self.nodes.lock().unwrap()[&port].freeze();
    }

    /// SIGCONT of a node.
    pub fn resume(&self, port: u16) {
        self.nodes.lock().unwrap()[&port].thaw();
    }

    /// Waits until every live node says the cluster is ok.
    pub fn wait_until_ok(&self) {
        let ports: Vec<u16> = self.nodes.lock().unwrap().keys().copied().collect();
        for port in ports {
            wait_for("became ok again", || cluster_ok(port));
        }
    }

    /// After a master was killed: waits until another node serves `slot` and the cluster is
    /// ok, and returns that node's port.
    pub fn wait_for_new_master_of_slot(&self, slot: u16, old: u16) -> u16 {
        let mut promoted = old;
        wait_for("promoted a new master", || {
            promoted = self.master_for_slot(slot);
            promoted != old
        });
        self.wait_until_ok();
        promoted
    }

    /// Starts moving `slot` with its keys to the master `to`: the target imports it, the
    /// source migrates it, and the keys are moved; the slot stays owned by the source, which
    /// answers ASK for keys it no longer has.
    pub fn begin_reshard(&self, slot: u16, to: u16) {
        let from = self.master_for_slot(slot);
        let (from_id, to_id) = (node_id(from), node_id(to));
        let setslot = |port: u16, state: &str, id: &str| {
            let _: () = super::query(
                &mut conn(port),
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            )
            .expect("CLUSTER SETSLOT");
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        let mut source = conn(from);
        loop {
            let keys: Vec<String> = super::query(
                &mut source,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            )
            .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let _: () = super::query(
                &mut source,
                redis::cmd("MIGRATE")
                    .arg(super::host_of(to))
                    .arg(to)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("KEYS")
                    .arg(&keys),
            )
            .expect("MIGRATE");
        }
    }

    /// Ends a move begun with [`begin_reshard`](Self::begin_reshard): every master is told
    /// that `to` owns the slot.
    pub fn finish_reshard(&self, slot: u16, to: u16) {
        let to_id = node_id(to);
        for &port in &self.masters_now() {
            let _: () = super::query(
                &mut conn(port),
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id),
            )
            .expect("CLUSTER SETSLOT NODE");
        }
        wait_for("agreed on the slot's new owner", || {
            self.master_for_slot(slot) == to
        });
    }

    /// The nodes that are masters now (after failovers, not those the cluster was made with).
    pub fn masters_now(&self) -> Vec<u16> {
        let ports: Vec<u16> = self.nodes.lock().unwrap().keys().copied().collect();
        ports
            .into_iter()
            .filter(|&port| info(port, "replication").contains("role:master"))
            .collect()
    }
}

/// The cluster's slot of `key` (CRC16-XModem of its hash tag, modulo 16384).
fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

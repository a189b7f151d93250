//! A real Sentinel deployment for tests: one master and two replicas (or one, as small
//! deployments run) of the selected server (`super::server_binary`), watched by three sentinels (`<server> sentinel.conf --sentinel`, a
//! fresh writable configuration each, quorum 2, down-after 1000 ms). Killed with the value.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{free_port, Network, RedisServer};

const MASTER_NAME: &str = "mymaster";
/// How long the deployment may take to settle or to fail over.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct RedisSentinel {
    /// Master and replicas by port; a killed one is gone from here.
    servers: Mutex<HashMap<u16, RedisServer>>,
    sentinels: Vec<(Child, u16)>,
    _dir: tempfile::TempDir,
}

fn conn(port: u16) -> Option<redis::Connection> {
    let host = super::host_of(port);
    let client = redis::Client::open(format!("redis://{host}:{port}/")).ok()?;
    let conn =
        super::again_if_interrupted(|| client.get_connection_with_timeout(Duration::from_secs(2)))
            .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    Some(conn)
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < SETTLE_TIMEOUT,
            "the deployment never {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn master_of(sentinel: u16) -> Option<u16> {
    let (_, port): (String, u16) = super::query(
        &mut conn(sentinel)?,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME),
    )
    .ok()?;
    Some(port)
}

/// Whether the server's `INFO replication` says `fact` (`role:master`, ...).
pub fn replication_says(port: u16, fact: &str) -> bool {
    conn(port)
        .and_then(|mut c| {
            redis::cmd("INFO")
                .arg("replication")
                .query::<String>(&mut c)
                .ok()
        })
        .is_some_and(|info| info.contains(fact))
}

impl RedisSentinel {
    /// Starts the master, two replicas in sync with it, and three sentinels that know all
    /// three.
    pub fn start() -> Self {
        Self::with_replicas(2)
    }

    /// Starts the master, `count` replicas in sync with it, and three sentinels that know
    /// them all.
    pub fn with_replicas(count: usize) -> Self {
        Self::start_on(count, None)
    }

    /// [`with_replicas`](Self::with_replicas) reached off loopback (opt-in, see [`Network`]):
    /// every server and sentinel here also binds `network.host_addr` and announces it, and the
    /// master runs in `network.netns` when given (its replicas and the sentinels reach it, and
    /// it them, over the namespace's link).
    pub fn with_network(count: usize, network: &Network) -> Self {
        Self::start_on(count, Some(network))
    }

    fn start_on(count: usize, network: Option<&Network>) -> Self {
        let master = match network {
            None => RedisServer::start(),
            Some(net) => {
                let place = net.node();
                let announce = ["--replica-announce-ip", place.addr.as_str()];
                RedisServer::start_placed(&announce, u16::MAX, place.clone())
            }
        };
        let master_port = master.port().to_string();
        // The address the sentinels and replicas know the master by.
        let master_host = network.map_or("127.0.0.1".into(), |net| net.node().addr);
        let replicas: Vec<RedisServer> = (0..count)
            .map(|_| match network {
                None => RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]),
                Some(net) => RedisServer::start_placed(
                    &[
                        "--replicaof",
                        &master_host,
                        &master_port,
                        "--replica-announce-ip",
                        &net.host_addr,
                    ],
                    u16::MAX,
                    net.here(),
                ),
            })
            .collect();
        for replica in &replicas {
            let port = replica.port();
            wait_for("synced a replica", || {
                replication_says(port, "master_link_status:up")
            });
        }
        wait_for("listed every replica as online", || {
            conn(master.port()).is_some_and(|mut c| super::role_lists_replicas(&mut c) == count)
        });
        let dir = tempfile::Builder::new()
            .prefix("redis-rlock-sentinel-")
            .tempdir()
            .expect("temp dir");
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            let bind = match network {
                None => "bind 127.0.0.1\n".to_string(),
                Some(net) => format!(
                    "bind 127.0.0.1 {addr}\nprotected-mode no\nsentinel announce-ip {addr}\n",
                    addr = net.host_addr
                ),
            };
            std::fs::write(
                &conf,
                format!(
                    "port {port}\n{bind}dir {dir}\n\
                     sentinel monitor {MASTER_NAME} {master_host} {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir = dir.path().display()
                ),
            )
            .expect("sentinel.conf");
            let log =
                std::fs::File::create(dir.path().join(format!("sentinel-{i}.log"))).expect("log");
            let child = Command::new(super::server_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .expect("run the server with --sentinel");
            sentinels.push((child, port));
        }
        let mut servers: HashMap<u16, RedisServer> =
            replicas.into_iter().map(|s| (s.port(), s)).collect();
        servers.insert(master.port(), master);
        let deployment = RedisSentinel {
            servers: Mutex::new(servers),
            sentinels,
            _dir: dir,
        };
        for &(_, port) in &deployment.sentinels {
            wait_for("knew the master and every replica", || {
                let Some(mut c) = conn(port) else {
                    return false;
                };
                let replicas: Vec<redis::Value> = super::query(
                    &mut c,
                    redis::cmd("SENTINEL").arg("replicas").arg(MASTER_NAME),
                )
                .unwrap_or_default();
                master_of(port).is_some() && replicas.len() == count
            });
        }
        deployment
    }

    /// Starts one more replica of the current master and waits until the master lists it
    /// (`ROLE`: in sync, counted by `WAIT`); returns its port. The sentinels learn of it from
    /// the master later ([`wait_until_sentinels_know`](Self::wait_until_sentinels_know)).
    pub fn add_replica(&self) -> u16 {
        let master = self.master_port();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.to_string()]);
        let port = replica.port();
        let mut servers = self.servers.lock().unwrap();
        let before = servers.len() - 1;
        servers.insert(port, replica);
        drop(servers);
        wait_for("listed the new replica as online", || {
            conn(master).is_some_and(|mut c| super::role_lists_replicas(&mut c) > before)
        });
        port
    }

    /// Waits until every sentinel lists `replica` as a replica that answers (a candidate for
    /// promotion).
    pub fn wait_until_sentinels_know(&self, replica: u16) {
        for &(_, sentinel) in &self.sentinels {
            wait_for("knew the new replica", || {
                let Some(mut c) = conn(sentinel) else {
                    return false;
                };
                let listed: Vec<HashMap<String, String>> = super::query(
                    &mut c,
                    redis::cmd("SENTINEL").arg("replicas").arg(MASTER_NAME),
                )
                .unwrap_or_default();
                listed.iter().any(|r| {
                    r.get("port").is_some_and(|p| *p == replica.to_string())
                        && r.get("flags").is_some_and(|f| f == "slave")
                        && r.get("master-link-status").is_some_and(|s| s == "ok")
                })
            });
        }
    }

    /// `redis://127.0.0.1:<port>/` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|(_, port)| format!("redis://127.0.0.1:{port}/"))
            .collect()
    }

    /// A manager through the sentinels, with a watchdog timeout two thirds of which outlast a
    /// failover (down-after 1 s plus the election).
    pub fn manager(&self) -> redis_rlock::LockManager {
        let urls = self.sentinel_urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        redis_rlock::LockManager::sentinel_builder(&urls, self.master_name())
            .watchdog_timeout(Duration::from_secs(9))
            .build()
            .expect("a manager through the sentinels")
    }

    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The master's port, as the first sentinel that answers says.
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(|&(_, port)| master_of(port))
            .expect("a sentinel names the master")
    }

    /// The ports of the servers that are not the master now.
    pub fn replica_ports(&self) -> Vec<u16> {
        let master = self.master_port();
        let mut ports: Vec<u16> = self
            .servers
            .lock()
            .unwrap()
            .keys()
            .copied()
            .filter(|&p| p != master)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// SIGKILL of the master; returns its port.
    pub fn kill_master(&self) -> u16 {
        let port = self.master_port();
        if let Some(mut server) = self.servers.lock().unwrap().remove(&port) {
            server.kill();
        }
        port
    }

    /// Waits until every sentinel names a master other than `old`, and that server says it
    /// is a master; returns its port.
    pub fn wait_for_failover(&self, old: u16) -> u16 {
        let mut promoted = old;
        wait_for("failed over", || {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|&(_, port)| master_of(port))
                .collect();
            match named.first().copied().flatten() {
                Some(new) if new != old && named.iter().all(|n| *n == Some(new)) => {
                    promoted = new;
                    replication_says(new, "role:master")
                }
                _ => false,
            }
        });
        promoted
    }

    /// `SENTINEL FAILOVER`: a failover without the master failing (the old master is demoted to
    /// a replica of the new one); returns the old master's port.
    pub fn graceful_failover(&self) -> u16 {
        let old = self.master_port();
        let (_, sentinel) = self.sentinels[0];
        // A sentinel refuses (NOGOODSLAVE) until it has heard from the replicas themselves.
        wait_for("accepted a failover", || {
            conn(sentinel).is_some_and(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(MASTER_NAME)
                    .query::<String>(&mut c)
                    .is_ok_and(|ok| ok == "OK")
            })
        });
        old
    }

    /// Makes the sentinels name a replica as the master while the old master stays up, a
    /// master still, with its clients connected: what a manager sees for a while when the
    /// sentinels decide a failover again under load (the server they promoted first is only
    /// demoted, its clients cut, later). The replica gets `REPLICAOF NO ONE` and every sentinel
    /// forgets the master and monitors the replica instead; returns its port once every
    /// sentinel names it.
    pub fn switch_master_by_hand(&self) -> u16 {
        let promoted = self.replica_ports()[0];
        let _: () = super::query(
            &mut conn(promoted).expect("the replica"),
            redis::cmd("REPLICAOF").arg("NO").arg("ONE"),
        )
        .expect("REPLICAOF NO ONE");
        for &(_, sentinel) in &self.sentinels {
            let mut c = conn(sentinel).expect("a sentinel");
            let _: () = super::query(
                &mut c,
                redis::cmd("SENTINEL").arg("REMOVE").arg(MASTER_NAME),
            )
            .expect("SENTINEL REMOVE");
            let _: () = super::query(
                &mut c,
                redis::cmd("SENTINEL")
                    .arg("MONITOR")
                    .arg(MASTER_NAME)
                    .arg("127.0.0.1")
                    .arg(promoted)
                    .arg(2),
            )
            .expect("SENTINEL MONITOR");
        }
        wait_for("named the replica", || {
            self.sentinels
                .iter()
                .all(|&(_, sentinel)| master_of(sentinel) == Some(promoted))
        });
        promoted
    }

    /// Waits until the server at `port` says it is a replica.
    pub fn wait_for_demotion(&self, port: u16) {
        wait_for("demoted the old master", || {
            replication_says(port, "role:slave")
        });
    }

    /// Cuts the replicas off the master for good: their `masterauth` is set to a password the
    /// master does not have, so that after their links are killed they cannot sync again;
    /// returns once the master has no replica. What the master writes afterwards reaches no
    /// replica.
    pub fn cut_replication(&self) {
        for replica in self.replica_ports() {
            let _: () = super::query(
                &mut conn(replica).expect("a replica"),
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("masterauth")
                    .arg("not-the-masters-password"),
            )
            .expect("CONFIG SET masterauth");
        }
        let master = self.master_port();
        let _: i64 = super::query(
            &mut conn(master).expect("the master"),
            redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"),
        )
        .expect("CLIENT KILL TYPE replica");
        wait_for("cut the replicas off", || {
            replication_says(master, "connected_slaves:0")
        });
    }

    /// Restarts a server on its port, empty, with its arguments (a replica then needs a full
    /// sync).
    pub fn restart_without_data(&self, port: u16) {
        self.servers
            .lock()
            .unwrap()
            .get_mut(&port)
            .expect("a server of the deployment")
            .restart_without_data();
    }

    /// SIGSTOP of a server.
    pub fn pause(&self, port: u16) {
        self.servers.lock().unwrap()[&port].freeze();
    }

    /// SIGCONT of a server.
    pub fn resume(&self, port: u16) {
        self.servers.lock().unwrap()[&port].thaw();
    }

    /// SIGSTOP (`"-STOP"`) or SIGCONT (`"-CONT"`) of every sentinel: a stopped sentinel
    /// accepts connections (the kernel does) and answers nothing.
    pub fn signal_sentinels(&self, signal: &str) {
        for (child, _) in &self.sentinels {
            let status = std::process::Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status()
                .expect("kill");
            assert!(status.success(), "kill {signal} of a sentinel");
        }
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for (child, _) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

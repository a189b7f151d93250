//! The test fixtures of redis-rlock: throwaway `redis-server` processes on free loopback
//! ports, and child processes of the test binary for multi-process tests.
//!
//! Every test starts the servers it needs and they are killed when dropped; nothing depends on
//! a server someone else started. The tests (those of `ffi/` too), the benchmark, the load
//! generator and the fault campaign use this crate (`publish = false`, a dev-dependency by
//! path only); the user-facing examples do not.
//!
//! The server is `redis-server` from `$PATH` unless `REDIS_RLOCK_SERVER` names another binary
//! (Valkey's `valkey-server`, an older Redis), and clusters are made with `redis-cli` unless
//! `REDIS_RLOCK_CLI` names another: `.ci/run` runs the tests that touch the server on each
//! server of its matrix that way (README, "Servers").

pub mod cluster;
pub mod proxy;
pub mod redis_py;
pub mod redisson;
pub mod redisson_spin;
pub mod sentinel;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The server binary the tests start: `$REDIS_RLOCK_SERVER`, or `redis-server`.
pub fn server_binary() -> String {
    std::env::var("REDIS_RLOCK_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The command-line client that makes clusters: `$REDIS_RLOCK_CLI`, or `redis-cli`.
pub fn cli_binary() -> String {
    std::env::var("REDIS_RLOCK_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// What the selected server is, from its `--version` (asked once per test binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerVersion {
    /// Valkey rather than Redis (Valkey numbers its own releases from 7.2 on).
    pub valkey: bool,
    pub major: u32,
    pub minor: u32,
}

impl ServerVersion {
    /// Whether this is Redis `major.minor` or newer, or any Valkey: every Valkey has what
    /// Redis 7.2 has.
    pub fn at_least_redis(&self, major: u32, minor: u32) -> bool {
        self.valkey || (self.major, self.minor) >= (major, minor)
    }
}

/// The selected server's version: `Redis server v=7.0.15 ...` or `Valkey server v=9.1.2 ...`.
pub fn server_version() -> ServerVersion {
    static VERSION: OnceLock<ServerVersion> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let binary = server_binary();
        let out = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {binary} --version ({e})"));
        let text = String::from_utf8_lossy(&out.stdout);
        let number = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or_else(|| panic!("no version in {binary} --version: {text}"));
        let mut parts = number.split('.').map(|n| n.parse().unwrap_or(0));
        ServerVersion {
            valkey: text.starts_with("Valkey"),
            major: parts.next().unwrap_or(0),
            minor: parts.next().unwrap_or(0),
        }
    })
}

/// Whether the selected server was built with TLS: the servers of the matrix that come from
/// wheels are not.
pub fn server_has_tls() -> bool {
    static TLS: OnceLock<bool> = OnceLock::new();
    *TLS.get_or_init(|| {
        // Asked to listen for TLS with a certificate that does not exist, every server exits
        // at once: one built with TLS because it cannot load the certificate, Redis 6 without
        // TLS on the unknown directive, Valkey without TLS because it has no TLS connection
        // type (it knows the directives).
        let out = Command::new(server_binary())
            .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
            .args(["--tls-port", &free_port().to_string()])
            .args(["--tls-cert-file", "/nonexistent"])
            .args(["--tls-key-file", "/nonexistent"])
            .stdin(Stdio::null())
            .output()
            .expect("run the server");
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        !(text.contains("Bad directive") || text.contains("Failed finding TLS support"))
    })
}

/// Prints why a test does nothing on the selected server, for tests that need what it lacks.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let binary = server_binary();
    // Straight to the process's stderr: the test harness keeps what `eprintln!` prints from
    // a test that passes, and a skip must show in CI's log.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {binary} {reason}");
}

/// Opens a plain redis-rs connection to `url` (5 s to connect), again when its setup was
/// interrupted: Linux fails a read with a timeout with EINTR when the process is stopped and
/// continued meanwhile (a frozen CI container), which says nothing about the server.
pub fn connect(url: &str) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(url)?;
    again_if_interrupted(|| client.get_connection_with_timeout(Duration::from_secs(5)))
}

/// Whether `err` is an interrupted system call (EINTR). Tests cannot call the crate's own
/// check, and the text depends only on the OS error number.
pub fn interrupted(err: &redis::RedisError) -> bool {
    err.is_io_error() && err.to_string().contains("os error 4")
}

/// Runs `attempt` again (3 times at most) while it fails with an interrupted read or write.
pub fn again_if_interrupted<T>(
    mut attempt: impl FnMut() -> redis::RedisResult<T>,
) -> redis::RedisResult<T> {
    let mut retries = 0;
    loop {
        match attempt() {
            Err(err) if retries < 3 && interrupted(&err) => retries += 1,
            other => return other,
        }
    }
}

/// `cmd` on `conn`, sent again when its reply wait was interrupted: for the helpers' own
/// commands on connections with a read timeout (only those get EINTR), which are safe to
/// repeat. redis-rs skips the interrupted command's reply when it comes, so the repeat's reply
/// is the one returned.
pub fn query<T: redis::FromRedisValue>(
    conn: &mut redis::Connection,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    again_if_interrupted(|| cmd.query(conn))
}

/// Where a server runs when it must be reached off loopback: opt-in, for the fault
/// campaign's network partitions. A server started without one binds 127.0.0.1 only.
#[derive(Clone, Debug)]
pub struct Placement {
    /// `Some(ns)`: inside the network namespace `ns` (`ip netns exec`, as root), bound on
    /// `addr` only and reached from this namespace by it; `None`: here, bound on 127.0.0.1
    /// and `addr`, reached by 127.0.0.1.
    pub netns: Option<String>,
    pub addr: String,
}

/// Opt-in addressing for a Sentinel set or a cluster reached off loopback: the servers and
/// sentinels here bind `host_addr` too and announce it (a process inside a namespace joined
/// to this one reaches them by it), and `netns`, when given, puts the master (on a cluster,
/// the first node) into the namespace `.0`, bound on and announcing the address `.1`.
#[derive(Clone, Debug)]
pub struct Network {
    pub host_addr: String,
    pub netns: Option<(String, String)>,
}

impl Network {
    /// The placement of a server on this side.
    pub fn here(&self) -> Placement {
        Placement {
            netns: None,
            addr: self.host_addr.clone(),
        }
    }

    /// The placement of the node inside the namespace, or here when there is none.
    pub fn node(&self) -> Placement {
        match &self.netns {
            Some((ns, addr)) => Placement {
                netns: Some(ns.clone()),
                addr: addr.clone(),
            },
            None => self.here(),
        }
    }
}

/// The addresses of servers running in other namespaces, by port (their port is reserved on
/// 127.0.0.1 here while they live, so a port names one server).
fn hosts() -> &'static Mutex<HashMap<u16, String>> {
    static HOSTS: OnceLock<Mutex<HashMap<u16, String>>> = OnceLock::new();
    HOSTS.get_or_init(Mutex::default)
}

/// The address this process reaches the server on `port` by: 127.0.0.1, or the namespace
/// address of a server started inside a network namespace ([`Placement`]).
pub fn host_of(port: u16) -> String {
    hosts()
        .lock()
        .unwrap()
        .get(&port)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// A `redis-server` child process in its own temporary directory, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
    password: Option<String>,
    /// Where it runs, when not on loopback only (opt-in).
    placement: Option<Placement>,
    /// For a server in another namespace: its port held on 127.0.0.1 here.
    _reserved: Option<TcpListener>,
}

impl RedisServer {
    /// Starts a server with persistence off on a free loopback port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--requirepass", "s3cret"]`).
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::start_below(extra_args, u16::MAX)
    }

    /// [`start_with`](Self::start_with) on a port below `limit` (a cluster node's bus listens
    /// on its port + 10000).
    pub fn start_below(extra_args: &[&str], limit: u16) -> Self {
        Self::start_inner(extra_args, limit, None)
    }

    /// [`start_below`](Self::start_below) at `placement`: in a network namespace or also
    /// bound on a non-loopback address, with protected mode off (opt-in, see [`Placement`]).
    pub fn start_placed(extra_args: &[&str], limit: u16, placement: Placement) -> Self {
        Self::start_inner(extra_args, limit, Some(placement))
    }

    fn start_inner(extra_args: &[&str], limit: u16, placement: Option<Placement>) -> Self {
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let password = extra_args
            .iter()
            .position(|a| a == "--requirepass")
            .map(|i| extra_args[i + 1].clone());
        let mut last_log = String::new();
        // A port found free can be taken by another test before the server binds it: retry.
        for _ in 0..5 {
            let inside = placement.as_ref().is_some_and(|p| p.netns.is_some());
            let (port, reserved) = if inside {
                let listener = reserved_port_below(limit);
                let port = listener.local_addr().expect("reserved port").port();
                (port, Some(listener))
            } else {
                (free_port_below(limit), None)
            };
            let mut server = RedisServer {
                child: None,
                port,
                dir: tempfile::Builder::new()
                    .prefix("redis-rlock-test-")
                    .tempdir()
                    .expect("temp dir for redis-server"),
                extra_args: extra_args.clone(),
                password: password.clone(),
                placement: placement.clone(),
                _reserved: reserved,
            };
            if let Some(Placement {
                netns: Some(_),
                addr,
            }) = &placement
            {
                hosts().lock().unwrap().insert(port, addr.clone());
            }
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(log) if log.contains("Address already in use") => last_log = log,
                Err(log) => panic_with_log(&log),
            }
        }
        panic_with_log(&last_log)
    }

    /// The URL to give a `LockManager`.
    pub fn url(&self) -> String {
        let host = self.host();
        match &self.password {
            Some(password) => format!("redis://:{password}@{host}:{}/", self.port),
            None => format!("redis://{host}:{}/", self.port),
        }
    }

    /// The address this process reaches it by: 127.0.0.1 unless it runs in a namespace.
    pub fn host(&self) -> String {
        match &self.placement {
            Some(Placement {
                netns: Some(_),
                addr,
            }) => addr.clone(),
            _ => "127.0.0.1".into(),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `ACL <args…>` on this server (a user of restricted rights, say), which must succeed.
    pub fn acl(&self, args: &[&str]) {
        let _: () = redis::cmd("ACL")
            .arg(args)
            .query(&mut self.conn())
            .expect("ACL");
    }

    /// A plain redis-rs connection to the server, for looking at what the crate wrote.
    pub fn conn(&self) -> redis::Connection {
        connect(&self.url()).expect("connection to the test server")
    }

    /// Kills the server (SIGKILL): every lock it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("server running")
            .id()
            .to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(log) = self.spawn_and_wait() {
            panic_with_log(&log);
        }
    }

    /// [`restart`](Self::restart) without the RDB file a replica keeps of its last full sync
    /// (with its replication offset, from which it would resume): a replica then needs a full
    /// sync again, as one just added does.
    pub fn restart_without_data(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
        if let Err(log) = self.spawn_and_wait() {
            panic_with_log(&log);
        }
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let log = self.dir.path().join("redis.log");
        let binary = server_binary();
        let mut cmd = match &self.placement {
            Some(Placement {
                netns: Some(ns), ..
            }) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, &binary]);
                cmd
            }
            _ => Command::new(&binary),
        };
        cmd.args(["--port", &self.port.to_string(), "--bind"]);
        match &self.placement {
            None => cmd.arg("127.0.0.1"),
            Some(Placement {
                netns: Some(_),
                addr,
            }) => cmd.arg(addr),
            Some(Placement { netns: None, addr }) => cmd.args(["127.0.0.1", addr]),
        };
        if self.placement.is_some() {
            // Protected mode refuses clients off loopback without a password.
            cmd.args(["--protected-mode", "no"]);
        }
        cmd.args(["--save", "", "--appendonly", "no"]);
        // Redis 7 refuses DEBUG unless asked; Redis 6 has no such setting (and allows it).
        if server_version().at_least_redis(7, 0) {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {binary} ({e}); install it (scripts/ensure-deps)"))?;
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().ok().flatten() {
                self.child = None;
                return Err(format!(
                    "{binary} exited with {status}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if self.ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err(format!(
            "{binary} did not answer within {START_TIMEOUT:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        ))
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut conn).is_ok()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if self._reserved.is_some() {
            hosts().lock().unwrap().remove(&self.port);
        }
    }
}

/// A loopback port below `limit` held by a listener, for a server that listens in another
/// namespace (and its cluster bus, port + 10000, there).
fn reserved_port_below(limit: u16) -> TcpListener {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        if listener.local_addr().expect("port").port() < limit {
            return listener;
        }
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A master and one replica that has caught up with it.
pub fn master_with_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.conn())
            .expect("INFO on the replica");
        let linked = info.contains("master_link_status:up");
        if linked && role_lists_replicas(&mut master.conn()) == 1 {
            return (master, replica);
        }
        assert!(
            Instant::now() < deadline,
            "the replica never linked:\n{info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many replicas a master's `ROLE` lists: those it counts as online, which the lock
/// manager counts when it starts (a replica may say its link is up a moment before).
pub fn role_lists_replicas(conn: &mut redis::Connection) -> usize {
    match redis::cmd("ROLE").query::<redis::Value>(conn) {
        Ok(redis::Value::Array(items)) => match items.get(2) {
            Some(redis::Value::Array(replicas)) => replicas.len(),
            _ => 0,
        },
        _ => 0,
    }
}

/// A free loopback port below `limit`.
pub fn free_port_below(limit: u16) -> u16 {
    loop {
        let port = free_port();
        if port < limit {
            return port;
        }
    }
}

fn panic_with_log(log: &str) -> ! {
    panic!("could not start {}:\n{log}", server_binary())
}

/// A command that runs this test binary again as a child process executing only the ignored
/// test `entry` (an entry point for child roles), with `env` set.
pub fn child_process(entry: &str, env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("path of the test binary"));
    cmd.args([
        "--exact",
        entry,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd
}

/// Reads a child's output until a line containing `marker`, returning what follows it; panics
/// if the child's output ends first. The marker may share a line with the test harness's own
/// "test child_role ... " text.
pub fn read_until_marker(stdout: &mut BufReader<ChildStdout>, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = stdout.read_line(&mut line).expect("reading child output");
        assert!(n > 0, "child output ended before {marker:?}");
        if let Some(at) = line.find(marker) {
            return line[at + marker.len()..].trim_end().to_string();
        }
    }
}

/// A manager for `server` with a short watchdog timeout, for tests that watch renewals.
pub fn manager_with_watchdog(server: &RedisServer, timeout: Duration) -> redis_rlock::LockManager {
    redis_rlock::LockManager::builder(&server.url())
        .watchdog_timeout(timeout)
        .build()
        .expect("manager")
}

/// A connection to `url` with TCP_NODELAY, as the crate's own connections have: the floor
/// that benchmarks compare the lock against must not pay Nagle's delays the lock avoids.
pub fn nodelay_conn(url: &str) -> redis::Connection {
    use redis::IntoConnectionInfo;
    let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    let info = url
        .into_connection_info()
        .expect("URL")
        .set_tcp_settings(tcp);
    redis::Client::open(info)
        .and_then(|c| c.get_connection())
        .expect("connection with TCP_NODELAY")
}

/// How many times the server ran `command` (lowercase, e.g. "evalsha"), from INFO
/// commandstats. Commands that scripts run inside Redis count too, so use it for commands that
/// only clients send.
pub fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a call count"))
}

/// The number of clients of `kind` ("normal", "pubsub") connected to the server, minus the one
/// asking.
pub fn client_count(conn: &mut redis::Connection, kind: &str) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg(kind)
        .query(conn)
        .expect("CLIENT LIST");
    let n = list.lines().filter(|l| !l.trim().is_empty()).count();
    if kind == "normal" {
        n - 1
    } else {
        n
    }
}

/// How many clients are subscribed to `channel` (`PUBSUB NUMSUB`).
pub fn numsub(conn: &mut redis::Connection, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(conn)
        .expect("PUBSUB NUMSUB");
    n
}

/// Polls `check` every 10 ms until it holds or `limit` passes; returns whether it held. For
/// conditions on another process or server, where no channel can tell us when.
pub fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if check() {
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The directory of `dir`, for tests that want to put files next to the server's.
pub fn dir_of(server: &RedisServer) -> PathBuf {
    server.dir.path().to_path_buf()
}

/// For examples: the server at `REDIS_URL` (default `redis://127.0.0.1:6379/`) if one answers
/// there, otherwise a throwaway `redis-server` started here, which the caller keeps alive.
pub fn url_from_env_or_start() -> (String, Option<RedisServer>) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let answers = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok();
    if answers {
        return (url, None);
    }
    let server = RedisServer::start();
    eprintln!(
        "nothing answered at {}; started a throwaway redis-server at {}",
        redact(&url),
        server.url()
    );
    (server.url(), Some(server))
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// A thread blocked in `manager.lock(name)` that records when it got the lock, then unlocks.
pub struct Waiter {
    handle: std::thread::JoinHandle<redis_rlock::Result<()>>,
    acquired: std::sync::mpsc::Receiver<Instant>,
}

impl Waiter {
    pub fn spawn(manager: &redis_rlock::LockManager, name: &str) -> Self {
        let (tx, acquired) = std::sync::mpsc::channel();
        let manager = manager.clone();
        let name = name.to_owned();
        let handle = std::thread::spawn(move || {
            let guard = manager.lock(&name)?;
            let _ = tx.send(Instant::now());
            guard.unlock()
        });
        Waiter { handle, acquired }
    }

    /// Whether the waiter has not got the lock yet. Only meaningful before `acquired_since`.
    pub fn is_waiting(&self) -> bool {
        matches!(
            self.acquired.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Empty)
        )
    }

    /// Waits (up to 20 s) for the waiter to get the lock and finish; returns how long after
    /// `since` it got the lock. Panics if it never does or its lock/unlock failed.
    pub fn acquired_since(self, since: Instant) -> Duration {
        let at = match self.acquired.recv_timeout(Duration::from_secs(20)) {
            Ok(at) => at,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let outcome = self.handle.join().expect("waiter thread");
                panic!("the waiter's lock failed: {outcome:?}");
            }
            Err(timeout) => panic!("the waiter did not get the lock: {timeout}"),
        };
        self.handle
            .join()
            .expect("waiter thread")
            .expect("the waiter's lock and unlock");
        at.saturating_duration_since(since)
    }
}

/// Subscribes `conn` to `channel` with a 5 s read timeout: a bystander watching what is
/// published there.
pub fn watch_channel<'a>(conn: &'a mut redis::Connection, channel: &str) -> Watcher<'a> {
    let mut pubsub = conn.as_pubsub();
    pubsub.subscribe(channel).expect("SUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    Watcher(pubsub)
}

/// A bystander subscribed with [`watch_channel`].
pub struct Watcher<'a>(redis::PubSub<'a>);

impl Watcher<'_> {
    /// The next message (5 s at most), read on when the read was interrupted: a read with a
    /// timeout fails with EINTR when the process is stopped and continued (see [`connect`]).
    pub fn get_message(&mut self) -> redis::RedisResult<redis::Msg> {
        again_if_interrupted(|| self.0.get_message())
    }
}

/// Waits (up to 10 s) until `manager`'s pub/sub listener has subscribed to its private wake-up
/// channel, which it does in the background after the manager starts: tests that count
/// commands or swallow replies must not catch that subscription by mistake.
pub fn await_listener(conn: &mut redis::Connection, manager: &redis_rlock::LockManager) {
    let control = format!("redis_rlock__control:{{{}}}", manager.client_id());
    assert!(
        await_subscribers(conn, &control, 1),
        "the manager's listener subscribed"
    );
}

/// Waits (up to 10 s) until `channel` has exactly `n` subscribers on the server; returns
/// whether it did. A waiter is known to be blocked once its subscription is live.
pub fn await_subscribers(conn: &mut redis::Connection, channel: &str, n: i64) -> bool {
    eventually(Duration::from_secs(10), || numsub(conn, channel) == n)
}

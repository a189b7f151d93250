//! A small blocking pool of Redis connections.
//!
//! Why not r2d2: it runs a scheduled thread pool of its own per pool (more threads per
//! manager, which the design rules out), and its checkout health checks cost a round trip
//! that the hot acquire/release path cannot afford. What a lock client needs is small: hand out
//! an idle connection or open one up to a limit, wait (bounded) when all are busy, and throw
//! away a connection whose state is unknown after an I/O error or a timeout.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{Client, Connection, RedisResult};

use crate::error::{is_interrupted, Error, Result};
use crate::fork::Origin;
use crate::topology::newer_commands::NewerCommands;
use crate::topology::pubsub_connection::{self, PubSubConnection, PubSubProtocol};

pub(crate) struct Pool {
    client: Client,
    /// `host:port` of the server: which master this is, in a topology (`crate::topology`).
    addr: Box<str>,
    /// How many replicas acquires and releases wait for (`LockManagerBuilder::replica_sync`):
    /// as many as the server had when last asked, unless it had fewer than before and that
    /// was not confirmed (see `count_replicas`).
    replicas: AtomicUsize,
    /// When the replicas were last counted; `None` until they are (a pool made for a node
    /// that a redirection named), so that the first acquire there counts them.
    replicas_counted: Mutex<Option<Instant>>,
    state: Mutex<PoolState>,
    freed: Condvar,
    max_size: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// How many replies redis-rs reads while setting up a connection (at least 1).
    setup_replies: u32,
    /// The process the connections belong to: a child made by fork() gets none of them.
    origin: Origin,
    /// The server refused `HELLO 3`: its pub/sub listener speaks RESP2 (`connect_listener`).
    hello_refused: AtomicBool,
    /// The server refused a renewal call whose keys span slots (CROSSSLOT: a cluster proxy
    /// in front of one endpoint): its renewals go one slot per call from then on.
    split_by_slot: AtomicBool,
    /// The server answered `WAIT` as an unknown command (a managed service, a proxy): replica
    /// sync does not wait there (`LockManagerBuilder::replica_sync`).
    no_wait: AtomicBool,
    /// A command here timed out, and no reply has come since: the server may be stopped
    /// (SIGSTOP, a stalled VM) and, where masters can be replaced, being replaced. Routing
    /// then asks the deployment again, and discovery asks this node last (`crate::topology`).
    silent: AtomicBool,
    /// Which newer compare-and-set commands the server knows, learnt by trying them.
    newer_commands: NewerCommands,
}

struct PoolState {
    /// Idle connections; the most recently used is at the end and is handed out first, so the
    /// connections in use stay warm and the rest can be closed by the server if idle too long.
    idle: Vec<Connection>,
    /// Connections open now, idle or checked out (or being opened).
    open: usize,
}

/// A connection checked out of the pool; it goes back when dropped unless it was discarded.
pub(crate) struct PooledConnection<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
    /// The connection was idle in the pool before, so it may have died unnoticed (for example
    /// when the server restarted). A fresh connection that fails has no such excuse.
    pub(crate) reused: bool,
}

/// How many times a connect interrupted by the process being stopped is tried again.
const INTERRUPTED_CONNECT_RETRIES: u32 = 3;

/// Opens a connection, again when the setup was interrupted (EINTR), and tries no more once
/// `deadline` has passed. redis-rs applies its timeout to the handshake and to each setup
/// reply in turn: each gets one of `shares` of the time left, so with `shares` at least their
/// number the connect ends by `deadline` (the topology's probe passes 1 and may take longer).
///
/// Linux fails a read on a socket with a timeout with EINTR when the process is stopped and
/// continued while the read waits, even with no signal handler (signal(7)): Ctrl-Z and `fg`,
/// a debugger, a frozen container; a handled signal does it too. Nothing is wrong with the
/// server then, and a connect (a handshake, AUTH or HELLO, SELECT) may be done again.
/// Commands on an open connection are not repeated here (see `LockStore::run_on`).
pub(crate) fn connect_by(
    client: &Client,
    shares: u32,
    deadline: Instant,
) -> RedisResult<Connection> {
    let mut retries = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let step = (left / shares.max(1)).max(Duration::from_millis(1));
        match client.get_connection_with_timeout(step) {
            Err(err)
                if retries < INTERRUPTED_CONNECT_RETRIES
                    && is_interrupted(&err)
                    && Instant::now() < deadline =>
            {
                retries += 1;
                log::debug!("connecting to Redis was interrupted ({err}); connecting again");
            }
            other => return other,
        }
    }
}

/// `cmd` on `conn`, sent once more on the same connection when its reply wait was interrupted
/// (EINTR, see [`connect_by`]): for commands that are safe to repeat there, which have nowhere
/// else to go. These are the commands that find the deployment (`ROLE`, `CLUSTER SLOTS`,
/// `PUBSUB SHARDNUMSUB`, a sentinel's answer, `PING`), which with a single server, seed or
/// sentinel would otherwise fail `build()`, and replica sync's `ROLE` and `INFO` (its `WAIT`
/// is repeated with a shorter timeout, in `LockStore`). redis-rs counts the interrupted reply
/// as still owed and skips it when it comes, so the repeat's reply is the one returned. The
/// repeat has a read timeout of its own: such a call may take up to twice its response
/// timeout.
pub(crate) fn query_again_if_interrupted<T: redis::FromRedisValue>(
    conn: &mut Connection,
    cmd: &redis::Cmd,
) -> RedisResult<T> {
    match cmd.query(conn) {
        Err(err) if is_interrupted(&err) => {
            log::debug!("waiting for a reply was interrupted ({err}); asking again");
            cmd.query(conn)
        }
        other => other,
    }
}

impl Pool {
    pub(crate) fn new(
        client: Client,
        max_size: usize,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        let settings = client.get_connection_info().redis_settings();
        let setup_replies =
            u32::from(settings.password().is_some() || settings.protocol().supports_resp3())
                + u32::from(settings.db() != 0)
                + 2 * u32::from(!settings.skip_set_lib_name());
        Pool {
            addr: client.get_connection_info().addr().to_string().into(),
            replicas: AtomicUsize::new(0),
            replicas_counted: Mutex::new(None),
            setup_replies: setup_replies.max(1),
            origin: Origin::current(),
            hello_refused: AtomicBool::new(false),
            split_by_slot: AtomicBool::new(false),
            no_wait: AtomicBool::new(false),
            silent: AtomicBool::new(false),
            newer_commands: NewerCommands::default(),
            client,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            max_size,
            connect_timeout,
            response_timeout,
        }
    }

    /// The redis-rs client the pool's connections are opened with.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// `host:port` of the server.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Which newer compare-and-set commands the server knows (see `NewerCommands`).
    pub(crate) fn newer_commands(&self) -> &NewerCommands {
        &self.newer_commands
    }

    /// How many replicas the server had when last asked.
    pub(crate) fn replicas(&self) -> usize {
        self.replicas.load(Ordering::Relaxed)
    }

    /// Takes `replicas` as the count to wait for, lower or not: the first count, or a lower
    /// one that nothing contradicts (see [`count_replicas`](Self::count_replicas)).
    pub(crate) fn set_replicas(&self, replicas: usize) {
        self.replicas.store(replicas, Ordering::Relaxed);
        *self.replicas_counted.lock() = Some(Instant::now());
    }

    /// Records a count of the server's replicas: taken when it is the first or a higher one;
    /// a lower one is only returned as `true`, for the caller to confirm. A master's replicas
    /// drop in number when one fails, and also when one is being promoted in its place:
    /// what the old master then writes reaches only replicas that will follow the new one and
    /// drop it (docs/design/deployments.md, "Replica sync through a failover").
    pub(crate) fn count_replicas(&self, replicas: usize) -> bool {
        let mut counted = self.replicas_counted.lock();
        let lower = counted.is_some() && replicas < self.replicas();
        if !lower {
            self.replicas.store(replicas, Ordering::Relaxed);
        }
        *counted = Some(Instant::now());
        lower
    }

    /// Whether the replicas were counted longer than `age` ago (replicas come and go), or
    /// never.
    pub(crate) fn replicas_older_than(&self, age: Duration) -> bool {
        self.replicas_counted
            .lock()
            .is_none_or(|counted| counted.elapsed() > age)
    }

    /// A command on this server timed out (see the field `silent`).
    pub(crate) fn went_silent(&self) {
        self.silent.store(true, Ordering::Relaxed);
    }

    /// The server answered a command.
    pub(crate) fn answered(&self) {
        // Read first: the common case writes nothing to a line that every thread reads.
        if self.silent.load(Ordering::Relaxed) {
            self.silent.store(false, Ordering::Relaxed);
        }
    }

    /// Whether the last command that ended here timed out, with no reply since.
    pub(crate) fn is_silent(&self) -> bool {
        self.silent.load(Ordering::Relaxed)
    }

    /// Whether the server knows `WAIT` (as far as anyone asked).
    pub(crate) fn knows_wait(&self) -> bool {
        !self.no_wait.load(Ordering::Relaxed)
    }

    /// Remembers that the server does not know `WAIT`; whether it was known.
    pub(crate) fn knows_no_wait_from_now(&self) -> bool {
        self.no_wait.swap(true, Ordering::Relaxed)
    }

    /// Whether calls with several keys must keep to one slot here: the server refused one
    /// that did not with CROSSSLOT ([`splits_by_slot_from_now`](Self::splits_by_slot_from_now)).
    pub(crate) fn splits_by_slot(&self) -> bool {
        self.split_by_slot.load(Ordering::Relaxed)
    }

    /// Remembers that the server refuses calls whose keys span slots; whether it was known.
    pub(crate) fn splits_by_slot_from_now(&self) -> bool {
        self.split_by_slot.swap(true, Ordering::Relaxed)
    }

    /// Opens a connection that is not counted against the pool, for the pub/sub listener
    /// (`crate::pubsub::listener`), in the protocol `protocol` asks for: with `Auto`, RESP3 unless
    /// the server refused `HELLO 3` (then, and from then on, RESP2).
    pub(crate) fn connect_listener(&self, protocol: PubSubProtocol) -> Result<PubSubConnection> {
        self.origin.check()?;
        let resp2 = protocol == PubSubProtocol::Resp2
            || (protocol == PubSubProtocol::Auto && self.hello_refused.load(Ordering::Relaxed));
        if resp2 {
            return self.connect_speaking(redis::ProtocolVersion::RESP2);
        }
        match self.connect_speaking(redis::ProtocolVersion::RESP3) {
            Err(Error::Connect { source }) if pubsub_connection::refused_hello(source.redis()) => {
                if protocol == PubSubProtocol::Resp3 {
                    return Err(Error::Connect {
                        source: crate::error::RedisFailure::new((
                            redis::ErrorKind::RESP3NotSupported,
                            "the server refused HELLO 3, which PubSubProtocol::Resp3 needs",
                            format!(
                                "{source}; use PubSubProtocol::Auto or Resp2 for an endpoint \
                                 without RESP3"
                            ),
                        )),
                    });
                }
                log::info!(
                    "{} refused HELLO 3 ({source}): its pub/sub listener speaks RESP2",
                    self.addr
                );
                self.hello_refused.store(true, Ordering::Relaxed);
                self.connect_speaking(redis::ProtocolVersion::RESP2)
            }
            other => other,
        }
    }

    /// A connection of its own, outside the pool, within one connect timeout: for the
    /// listener's client tracking (`crate::pubsub::tracking`), whose state lives on the
    /// connection and must not be handed to other callers.
    pub(crate) fn connect_detached(&self) -> Result<Connection> {
        self.origin.check()?;
        self.connect(self.connect_timeout)
    }

    /// A pub/sub connection in `protocol`, within one connect timeout.
    fn connect_speaking(&self, protocol: redis::ProtocolVersion) -> Result<PubSubConnection> {
        let info = self.client.get_connection_info().clone();
        let settings = info.redis_settings().clone().set_protocol(protocol);
        let client = Client::open(info.set_redis_settings(settings)).map_err(Error::invalid_url)?;
        let deadline = Instant::now() + self.connect_timeout;
        // HELLO, or AUTH, and SELECT: one reply more than the pool's RESP2 setup at most.
        let conn =
            connect_by(&client, self.setup_replies + 1, deadline).map_err(Error::from_connect)?;
        Ok(PubSubConnection::new(
            conn,
            protocol == redis::ProtocolVersion::RESP2,
        ))
    }

    /// Opens a connection in at most `timeout` (TCP or TLS handshake and setup commands).
    fn connect(&self, timeout: Duration) -> Result<Connection> {
        // redis-rs applies its timeout to the handshake and then to each setup reply in turn
        // (AUTH or HELLO, SELECT), reading every one even after one timed out: on a paused
        // server that is one full timeout per reply. Shares of the timeout keep the whole
        // connect within it.
        connect_by(&self.client, self.setup_replies, Instant::now() + timeout).map_err(|source| {
            if source.is_timeout() {
                // EAGAIN from a socket timeout would read "Resource temporarily
                // unavailable": say what did not happen in time instead.
                Error::Timeout {
                    operation: "connecting to Redis",
                    after: timeout,
                }
            } else {
                Error::from_connect(source)
            }
        })
    }

    /// Takes an idle connection, opens a new one if the pool is below its size, or waits for
    /// one to be returned. Waiting takes at most one response timeout and connecting at most
    /// one connect timeout, and neither goes past `deadline`: the caller's whole operation
    /// (this, a retry, the reply) has to fit before it.
    pub(crate) fn get_by(&self, deadline: Instant) -> Result<PooledConnection<'_>> {
        // The last line of defence after fork(): whatever path gets here, a child must not
        // send on the parent's sockets (and must not take the pool's lock, which a parent's
        // thread may have held at the fork).
        self.origin.check()?;
        let started = Instant::now();
        let wait_until = deadline.min(started + self.response_timeout);
        let mut state = self.state.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(PooledConnection {
                    pool: self,
                    conn: Some(conn),
                    reused: true,
                });
            }
            if state.open < self.max_size {
                state.open += 1;
                drop(state);
                return self.open_counted(deadline);
            }
            if self.freed.wait_until(&mut state, wait_until).timed_out() {
                return Err(Error::Timeout {
                    operation: "waiting for a pooled connection",
                    after: wait_until.saturating_duration_since(started),
                });
            }
        }
    }

    /// Takes an idle connection if there is one, never opening or waiting for one: for the
    /// renewal sweep, which writes to every master whose connection is at hand before it may
    /// spend its time connecting to one that does not answer.
    pub(crate) fn get_idle(&self) -> Result<Option<PooledConnection<'_>>> {
        self.origin.check()?;
        Ok(self.state.lock().idle.pop().map(|conn| PooledConnection {
            pool: self,
            conn: Some(conn),
            reused: true,
        }))
    }

    /// Closes every idle connection: when one turned out dead (a server restart), its
    /// siblings almost certainly are too, and each would otherwise cost a failed round trip.
    pub(crate) fn drop_idle(&self) {
        let stale = {
            let mut state = self.state.lock();
            let stale = std::mem::take(&mut state.idle);
            state.open -= stale.len();
            stale
        };
        drop(stale);
        self.freed.notify_all();
    }

    /// Opens the connection already counted in `open`, or uncounts it on failure.
    fn open_counted(&self, deadline: Instant) -> Result<PooledConnection<'_>> {
        match self.open_connection(deadline) {
            Ok(conn) => Ok(PooledConnection {
                pool: self,
                conn: Some(conn),
                reused: false,
            }),
            Err(err) => {
                self.forget_one();
                Err(err)
            }
        }
    }

    fn open_connection(&self, deadline: Instant) -> Result<Connection> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // Nothing was sent: no time is left for even a connect (a retry after a dead
            // connection that used up the budget).
            return Err(Error::Timeout {
                operation: "connecting to Redis",
                after: Duration::ZERO,
            });
        }
        let conn = self.connect(self.connect_timeout.min(left))?;
        let timeout = Some(self.response_timeout);
        conn.set_read_timeout(timeout)
            .and_then(|()| conn.set_write_timeout(timeout))
            .map_err(Error::connect)?;
        Ok(conn)
    }

    fn forget_one(&self) {
        self.state.lock().open -= 1;
        self.freed.notify_one();
    }

    fn put_back(&self, conn: Connection) {
        self.state.lock().idle.push(conn);
        self.freed.notify_one();
    }
}

impl<'a> PooledConnection<'a> {
    /// Closes the connection instead of returning it: after an I/O error or a timeout a late
    /// reply may still be on its way, and the next user would read it as its own.
    pub(crate) fn discard(mut self) {
        if self.conn.take().is_some() {
            self.pool.forget_one();
        }
    }

    /// Closes the connection and opens a new one in its place, by `deadline`, for a retry
    /// (see `discard` for why it is not reused). The place stays counted meanwhile: freed, it
    /// could be taken by a waiting thread, and the pool would grow past its size.
    pub(crate) fn reconnect(mut self, deadline: Instant) -> Result<PooledConnection<'a>> {
        let pool = self.pool;
        // Closed here; its place in `open` passes to the new one (or is forgotten below).
        self.conn = None;
        if let Err(err) = pool.origin.check() {
            pool.forget_one();
            return Err(err);
        }
        pool.open_counted(deadline)
    }
}

impl std::ops::Deref for PooledConnection<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl std::ops::DerefMut for PooledConnection<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for PooledConnection<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if redis::ConnectionLike::is_open(&conn) {
                self.pool.put_back(conn);
            } else {
                self.pool.forget_one();
            }
        }
    }
}

//! Where lock state lives: every Redis command the crate sends goes through [`LockStore`].
//!
//! This is the one seam between the lock logic and the deployment. Each command is routed by
//! its lock's name to the master that serves it ([`Topology`]: one server, the master Sentinel
//! names, or the slot's master in a cluster), follows MOVED and ASK redirections, and finds
//! the master again after a failover; a command is sent again where it did not run, where
//! running it twice changes nothing (an acquire carries its attempt id, a release its latch),
//! and after a pooled connection died, where it most likely did not run (docs/design/deployments.md,
//! "Never twice blindly"); a timeout never is. With replica sync on, acquires and releases
//! wait for a replica's acknowledgement (`WAIT`) on the connection that made them.
//!
//! This file holds the store itself and its core: connecting, routing a command to its
//! master, sending it and following redirections and failovers. The rest is in its own file:
//! - `replies`: the replies every kind's scripts share;
//! - `latches`: the latches that make releases safe to send again;
//! - `resend`: whether a failed command is sent again, and how failures are told;
//! - `replicas`: waiting for replicas' acknowledgements (replica sync);
//! - `renewal`: the watchdog's renewal sweeps, one pipeline per master.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Connection, RedisResult};

use crate::error::{Error, Result};
use crate::stats::Counters;
use crate::store::scripts::{Script, ScriptInvocation};
use crate::topology::capabilities::Capabilities;
use crate::topology::config::Config;
use crate::topology::endpoints::Endpoints;
use crate::topology::newer_commands::NewerCommands;
use crate::topology::pool::{Pool, PooledConnection};
use crate::topology::pubsub_connection::{PubSubConnection, PubSubProtocol};
use crate::topology::Topology;

pub(crate) mod acl;
pub(crate) mod eviction;
mod latches;
mod renewal;
mod replicas;
mod replies;
mod resend;
pub(crate) mod scripts;

pub(crate) use replies::{Attempt, Release, UNLOCK_MESSAGE};
pub(crate) use resend::Op;
#[cfg(doc)]
use resend::Policy;
use resend::{is_broken, is_dead_connection, is_unreachable, Failed};
pub(crate) use resend::{is_lost_reply, is_not_local, send_again_if_lost};

/// How many MOVED or ASK redirections one command follows before giving up.
const REDIRECTS_MAX: u32 = 5;

/// How long to wait before asking again while a failover is under way (CLUSTERDOWN,
/// TRYAGAIN, a refused connection to a master that just died).
const FAILOVER_RETRY: Duration = Duration::from_millis(50);

pub(crate) struct LockStore {
    topology: Topology,
    /// `publish`, or `spublish` on a cluster with sharded pub/sub (what Redisson does there).
    publish_command: &'static str,
    /// The `PUBSUB` subcommand that counts a lock channel's subscribers where releases are
    /// published (`numsub`, or `shardnumsub` with sharded pub/sub), or empty where it cannot
    /// count them all (a cluster without sharded pub/sub, whose plain messages reach every
    /// node): then no release grants a lock to a registered waiter (docs/design/engine.md, "Grants").
    numsub_command: &'static str,
    /// How long an acquire or release waits for a replica's acknowledgement (`None`: it does
    /// not wait; see `LockManagerBuilder::replica_sync`).
    replica_sync: Option<Duration>,
    latch_ttl_ms: u64,
    /// How long a fair-lock waiter without a wait limit keeps its place, in ms.
    fair_lock_wait_ms: u64,
    response_timeout: Duration,
    /// What the pub/sub listeners speak (`LockManagerBuilder::pubsub_protocol`).
    pubsub_protocol: PubSubProtocol,
    /// The latches of this client's releases of each lock whose replies are in hand (usually
    /// one; more when releases overlapped): the next release of that lock deletes them (see
    /// `RELEASE`), so a busy lock leaves a latch or two behind, not one per unlock.
    last_latch: Mutex<HashMap<Box<str>, Vec<String>>>,
    latch_ids: latches::LatchIds,
    /// What this client sent; the listener and the watchdog count here too.
    pub(crate) counters: Arc<Counters>,
}

impl LockStore {
    /// Finds the deployment's masters (so a wrong address or password is reported now rather
    /// than at the first lock) and loads the `preload` scripts on each (the reentrant lock's,
    /// so that the first call of each does not meet NOSCRIPT).
    pub(crate) fn connect(
        endpoints: &Endpoints,
        config: &Config,
        preload: &[&'static Script],
    ) -> Result<Self> {
        let topology = Topology::connect(endpoints, config)?;
        let Capabilities {
            publish_command,
            numsub_command,
            ..
        } = *topology.capabilities();
        let store = LockStore {
            topology,
            publish_command,
            numsub_command,
            replica_sync: config.replica_sync.then_some(config.replica_sync_timeout),
            latch_ttl_ms: config.latch_ttl_ms(),
            fair_lock_wait_ms: config.fair_lock_wait_timeout_ms,
            response_timeout: config.response_timeout,
            pubsub_protocol: config.pubsub_protocol,
            last_latch: Mutex::new(HashMap::new()),
            latch_ids: latches::LatchIds::new(),
            counters: Arc::new(Counters::default()),
        };
        store.load_scripts(preload)?;
        Ok(store)
    }

    /// Loads the scripts on every master. On a cluster a master that cannot be reached is
    /// passed over (a failover may be under way as the manager starts; its replica gets the
    /// scripts on its first NOSCRIPT), as long as one master loaded them.
    fn load_scripts(&self, scripts: &[&'static Script]) -> Result<()> {
        let mut unreachable = Vec::new();
        let masters = self.topology.map();
        for pool in masters.masters() {
            match self.load_scripts_on(pool, scripts) {
                Ok(()) => {}
                Err(err)
                    if self.topology.capabilities().several_masters && is_unreachable(&err) =>
                {
                    log::warn!(
                        "cannot load the lock scripts on the master at {}: {err}; passing it \
                         over (its slots work once it answers, or its replica is promoted)",
                        pool.addr()
                    );
                    unreachable.push((pool.addr().to_owned(), err));
                }
                Err(err) if self.topology.capabilities().masters_move => {
                    return Err(Error::at(pool.addr(), err))
                }
                Err(err) => return Err(err),
            }
        }
        if unreachable.len() == masters.masters().len() {
            return Err(Error::Nodes {
                asked: "no master answered".into(),
                tried: unreachable,
            });
        }
        Ok(())
    }

    fn load_scripts_on(&self, pool: &Pool, scripts: &[&'static Script]) -> Result<()> {
        // One script per round trip: a pipeline's replies would share one response timeout
        // (see `call`), and compiling a script can take a while on a busy server.
        for script in scripts {
            let load = |conn: &mut Connection| script.load(conn);
            let deadline = Instant::now() + self.response_timeout;
            self.run_on(
                pool,
                Op::LoadScripts,
                1,
                deadline,
                false,
                (&load, &|_| false),
            )
            .map_err(|failed| failed.into_error(self, Op::LoadScripts, ""))?;
        }
        Ok(())
    }

    /// Opens a pub/sub listener's own connection (RESP3 or RESP2, see
    /// `LockManagerBuilder::pubsub_protocol`; not counted against any pool) to the node at
    /// `addr`.
    pub(crate) fn connect_listener_at(&self, addr: &str) -> Result<PubSubConnection> {
        self.topology
            .node(addr)
            .and_then(|pool| pool.connect_listener(self.pubsub_protocol))
    }

    /// The deployment's topology (for the listener, which follows the masters too).
    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Whether releases of this deployment's locks may grant them to registered waiters
    /// (see `numsub_command`).
    pub(crate) fn grants_possible(&self) -> bool {
        !self.numsub_command.is_empty()
    }

    /// The `PUBSUB` subcommand a release counts its channel's subscribers with (see
    /// `numsub_command`; empty where releases grant nothing).
    pub(crate) fn numsub_command(&self) -> &'static str {
        self.numsub_command
    }

    /// The command that publishes unlock messages (`publish` on a single server).
    pub(crate) fn publish_command(&self) -> &'static str {
        self.publish_command
    }

    /// How long a fair-lock waiter without a wait limit keeps its place in the queue, in ms
    /// (a setting of the manager that only the fair lock's scripts need).
    pub(crate) fn fair_lock_wait_ms(&self) -> u64 {
        self.fair_lock_wait_ms
    }

    /// How long an unlock latch lives, in ms.
    pub(crate) fn latch_ttl_ms(&self) -> u64 {
        self.latch_ttl_ms
    }

    /// How long one command may wait for its reply.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Runs one script invocation (see [`ScriptInvocation::invoke`]) as one round trip on a
    /// pooled connection.
    pub(crate) fn invoke<T: redis::FromRedisValue>(
        &self,
        operation: Op,
        name: &str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T> {
        self.run(operation, name, 1, |conn| invocation.invoke(conn))
    }

    /// [`invoke`](Self::invoke) for an acquire attempt whose script answers the holder's
    /// remaining lease (an integer) when it took nothing: then replica sync waits for nobody.
    pub(crate) fn invoke_attempt(
        &self,
        name: &str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<redis::Value> {
        self.run_attempt(
            name,
            |conn| invocation.invoke(conn),
            |reply| !matches!(reply, redis::Value::Int(_)),
        )
    }

    /// Publishes `message` on `channel` at the node `addr` (`host:port`) within `budget`: a
    /// listener's private wake-up channel, at the master whose connection it reads, so that
    /// another master that stalls or is gone does not hold up (or lose) the wake-up; and the
    /// start-up's check of the channel rights, at a master that answers.
    pub(crate) fn publish_at(
        &self,
        addr: &str,
        channel: &str,
        message: &str,
        budget: Duration,
    ) -> Result<()> {
        let pool = self.topology.node(addr)?;
        let deadline = Instant::now() + budget.max(Duration::from_millis(1));
        let op = |conn: &mut Connection| publish_query(conn, channel, message);
        self.run_on(&pool, Op::Publish, 1, deadline, false, (&op, &|_| false))
            .map_err(|failed| failed.into_error(self, Op::Publish, ""))?;
        Ok(())
    }

    /// Runs `op`, one round trip of `commands` commands, on a pooled connection to the master
    /// of `name`, within one response timeout in all (see [`run_within`](Self::run_within)).
    pub(crate) fn run<T>(
        &self,
        operation: Op,
        name: &str,
        commands: u64,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within(operation, name, commands, self.response_timeout, op)
    }

    /// [`run`](Self::run) for an acquire attempt: replica sync waits for the replicas only
    /// when `acquired` says the reply is a hold taken (an attempt that found the lock held
    /// wrote nothing, and waiting for replicas that lag would only fail it).
    pub(crate) fn run_attempt<T>(
        &self,
        name: &str,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
        acquired: impl Fn(&T) -> bool,
    ) -> Result<T> {
        let op = |conn: &mut Connection, _: &Pool| op(conn);
        self.run_within_if(Op::Acquire, name, 1, self.response_timeout, op, &acquired)
    }

    /// [`run`](Self::run) for an `op` that sends the newer commands its master knows
    /// (`NewerCommands`, learnt per server), or their scripts where it does not.
    pub(crate) fn run_knowing<T>(
        &self,
        operation: Op,
        name: &str,
        op: impl Fn(&mut Connection, &NewerCommands) -> RedisResult<T>,
    ) -> Result<T> {
        let op = |conn: &mut Connection, pool: &Pool| op(conn, pool.newer_commands());
        self.run_within_if(operation, name, 1, self.response_timeout, op, &|_| true)
    }

    /// Runs `op`, one round trip of `commands` commands, on a pooled connection to the master
    /// that serves `name` (any master for `""`), and returns within `budget` in all: waiting
    /// for a connection, connecting, retries and every reply share it (a call must return
    /// within its wait plus one response timeout, and a stalled server must not hold the
    /// watchdog past the leases it renews).
    ///
    /// `op` runs again only where it did not run: after a MOVED or ASK reply (on the node
    /// named), after READONLY or CLUSTERDOWN or a refused connection during a failover (on
    /// the master found again), and on a fresh connection when a pooled one turned out dead
    /// (where it may have run after all: only where `operation`'s [`Policy`] allows; an
    /// acquire's attempt id makes the second send take nothing more). Besides, an idempotent
    /// `op` is sent again when the wait for its reply was interrupted. A timeout is never
    /// retried, since the command may still run on the server.
    pub(crate) fn run_within<T>(
        &self,
        operation: Op,
        name: &str,
        commands: u64,
        budget: Duration,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let op = |conn: &mut Connection, _: &Pool| op(conn);
        self.run_within_if(operation, name, commands, budget, op, &|_| true)
    }

    /// [`run_within`](Self::run_within), where replica sync waits for the replicas only when
    /// `wrote` says of the reply that the script changed something.
    fn run_within_if<T>(
        &self,
        operation: Op,
        name: &str,
        commands: u64,
        budget: Duration,
        op: impl Fn(&mut Connection, &Pool) -> RedisResult<T>,
        wrote: &dyn Fn(&T) -> bool,
    ) -> Result<T> {
        let started = Instant::now();
        let deadline = started + budget.max(Duration::from_millis(1));
        let (pool, generation) = self.topology.route_by(name, Some(deadline))?;
        let mut route = Route {
            pool,
            generation,
            asking: false,
            redirects: 0,
            failover: None,
        };
        loop {
            let pool = &route.pool;
            let sent = self.run_on(
                pool,
                operation,
                commands,
                deadline,
                route.asking,
                (&|conn: &mut Connection| op(conn, pool), wrote),
            );
            let failed = match sent {
                Ok(value) => return Ok(value),
                // Out of time while looking for the master: the failover is the news, not a
                // timeout of nothing.
                Err(Failed::Other(Error::Timeout { .. })) if route.failover.is_some() => {
                    let (failed, addr) = route.failover.take().expect("checked");
                    return Err(Error::at(addr, failed.into_error(self, operation, name)));
                }
                Err(failed) => failed,
            };
            let time_left = Instant::now() < deadline;
            route.asking = false;
            let Some(failed) =
                self.reroute(&mut route, operation, name, failed, time_left, deadline)?
            else {
                continue;
            };
            let in_failover = !time_left && failed.means_topology_changed(self);
            let err = failed.into_error(self, operation, name).timed(started);
            // Out of time in a failover: which master failed is part of the news.
            return Err(if in_failover {
                Error::at(route.pool.addr(), err)
            } else {
                err
            });
        }
    }

    /// Where a command that `failed` goes next, when it did not run and may go again:
    /// `route` is pointed there and `None` returned; else the failure to report. Only with
    /// `time_left` (and for redirections, fewer than `REDIRECTS_MAX` of them).
    fn reroute(
        &self,
        route: &mut Route,
        operation: Op,
        name: &str,
        failed: Failed,
        time_left: bool,
        deadline: Instant,
    ) -> Result<Option<Failed>> {
        let redirects_left = time_left && route.redirects < REDIRECTS_MAX;
        if let Some((addr, ask)) = failed.redirection() {
            if !time_left {
                return Ok(Some(failed));
            }
            if !redirects_left {
                // The nodes send the command round in a circle: they disagree on who serves
                // the slot (a migration or a failover whose news has not reached every node
                // yet, slower on a loaded machine). Waited out as a failover is, by the
                // deadline.
                self.wait_for_agreement(route, operation, name, &failed, deadline)?;
                return Ok(None);
            }
            route.redirects += 1;
            if ask {
                // The slot is moving: this key is at `addr` already, for this command only
                // (ASKING first).
                route.pool = self.topology.node(&addr)?;
                route.asking = true;
            } else {
                // The slot moved: ask for the new map, and send this command where the server
                // said (the map may be too fresh to be asked again yet).
                self.topology.refresh_by(route.generation, deadline);
                route.generation = self.topology.map().generation;
                route.pool = self.topology.node(&addr)?;
            }
        } else if redirects_left && failed.is_not_local() {
            // A managed cluster behind one endpoint (ElastiCache Serverless, under load) sent
            // the script to a node that does not serve its slot. It stopped at its first key,
            // and every key of a call shares one slot: nothing ran. Asked again, as after a
            // redirection (the endpoint routes it anew).
            route.redirects += 1;
            log::debug!(
                "{operation} at {}: {failed:?}; asking again",
                route.pool.addr()
            );
            pause_before_asking_again(deadline);
            if self.topology.capabilities().masters_move {
                self.topology.refresh_by(route.generation, deadline);
            }
            (route.pool, route.generation) = self.topology.route_by(name, Some(deadline))?;
        } else if time_left && failed.means_topology_changed(self) {
            // Waiting for a failover or a migration to end is progress, not a loop of
            // redirections: a slot half-way through a migration answers TRYAGAIN (from its
            // new owner, for a script whose keys are not all there yet) until it ends.
            route.redirects = 0;
            log::debug!(
                "{operation} at {}: {failed:?}; finding the master again",
                route.pool.addr()
            );
            pause_before_asking_again(deadline);
            self.topology.refresh_by(route.generation, deadline);
            route.failover = Some((failed, route.pool.addr().to_owned()));
            // `run_on` sends nothing once the deadline has passed.
            (route.pool, route.generation) = self.topology.route_by(name, Some(deadline))?;
        } else {
            return Ok(Some(failed));
        }
        Ok(None)
    }

    /// After [`REDIRECTS_MAX`] redirections of one command: pauses, asks for the map again and
    /// routes by it, with a new count of redirections.
    fn wait_for_agreement(
        &self,
        route: &mut Route,
        operation: Op,
        name: &str,
        failed: &Failed,
        deadline: Instant,
    ) -> Result<()> {
        log::debug!(
            "{operation} at {}: {failed:?} after {REDIRECTS_MAX} redirections; \
             asking for the map again",
            route.pool.addr()
        );
        route.redirects = 0;
        pause_before_asking_again(deadline);
        self.topology.refresh_by(route.generation, deadline);
        (route.pool, route.generation) = self.topology.route_by(name, Some(deadline))?;
        Ok(())
    }

    /// Runs `op` on a pooled connection to `pool`'s server by `deadline` (`ASKING` first when
    /// `asking`), retrying once on a fresh connection where the operation's policy allows
    /// (see [`send`](Self::send)); then, for acquires and releases with replica sync on,
    /// waits for the replicas.
    fn run_on<T, F: Fn(&mut Connection) -> RedisResult<T>>(
        &self,
        pool: &Pool,
        operation: Op,
        commands: u64,
        deadline: Instant,
        asking: bool,
        (op, wrote): (&F, &dyn Fn(&T) -> bool),
    ) -> std::result::Result<T, Failed> {
        let conn = pool.get_by(deadline).map_err(Failed::Other)?;
        if Instant::now() >= deadline {
            // An idle connection is handed out whatever the time: a command sent now could
            // only run with its reply given up on (a hold nobody knows of, for an acquire).
            return Err(too_late(operation));
        }
        let (conn, result) = self.send(pool, conn, operation, commands, deadline, asking, op)?;
        let value = match result {
            Ok(value) => {
                pool.answered();
                value
            }
            Err(err) => {
                if err.is_timeout() {
                    // Maybe stopped, and being replaced: the next call asks the deployment.
                    pool.went_silent();
                } else if err.code().is_some() {
                    pool.answered(); // an error reply is a reply
                }
                if is_broken(&err) {
                    conn.discard();
                }
                return Err(Failed::Redis(err));
            }
        };
        if let Some(timeout) = self.replica_sync {
            if operation.policy().replicated {
                let wrote = wrote(&value);
                self.await_replicas(pool, conn, operation, timeout, wrote)?;
            }
        }
        Ok(value)
    }

    /// Sends `op` on `conn`, and once more on a fresh connection when `conn` was reused and
    /// turned out dead, or the wait for the reply was interrupted (the process stopped and
    /// continued), if the operation's policy allows (see [`Op::policy`]). Returns the
    /// connection the last send went out on, and its result.
    #[allow(clippy::too_many_arguments)]
    fn send<'p, T, F: Fn(&mut Connection) -> RedisResult<T>>(
        &self,
        pool: &'p Pool,
        mut conn: PooledConnection<'p>,
        operation: Op,
        commands: u64,
        deadline: Instant,
        asking: bool,
        op: &F,
    ) -> std::result::Result<(PooledConnection<'p>, RedisResult<T>), Failed> {
        self.counters.sent(commands + u64::from(asking));
        let result = self.call(&mut conn, commands, deadline, asking, op);
        let Err(err) = &result else {
            return Ok((conn, result));
        };
        // Interrupted: the process was stopped and continued while it waited for the reply
        // (see `pool::connect_by`); the server is fine, and the command has almost surely run.
        let interrupted = crate::error::is_interrupted(err);
        let dead = conn.reused && is_dead_connection(err);
        if !interrupted && !dead {
            return Ok((conn, result));
        }
        let policy = operation.policy();
        let repeat = if interrupted {
            policy.after_interrupt
        } else {
            policy.after_dead_connection
        };
        if !repeat {
            // The server may have run it (before the connection died, in a CLIENT KILL's
            // pass; almost surely, when the wait was interrupted): sent again, it would count
            // twice. The caller is told; after a dead connection the next call gets a new one.
            conn.discard();
            if !interrupted {
                pool.drop_idle();
            }
            return Err(Failed::Redis(result.err().expect("an error")));
        }
        if Instant::now() >= deadline {
            conn.discard();
            // No time is left to send it again (and wait for the reply).
            return Err(too_late(operation));
        }
        if interrupted {
            log::debug!("{operation}: waiting for the reply was interrupted; sending it again on a new connection");
        } else {
            log::debug!("{operation}: pooled connection was dead ({err}); retrying on a new one");
            // Its idle siblings are most likely dead too (a restart). After an interrupt
            // they are fine: none of them was waiting.
            pool.drop_idle();
        }
        let mut conn = conn.reconnect(deadline).map_err(Failed::Other)?;
        if Instant::now() >= deadline {
            // Connecting took the time left: a command sent now could only run with its reply
            // given up on.
            return Err(too_late(operation));
        }
        self.counters.reconnect();
        self.counters.sent(commands + u64::from(asking));
        let result = self.call(&mut conn, commands, deadline, asking, op);
        Ok((conn, result))
    }

    /// After an acquire or release with replica sync on: waits for the replicas (see
    /// `sync_replicas`), and tells what their silence means for the operation.
    fn await_replicas(
        &self,
        pool: &Pool,
        mut conn: PooledConnection<'_>,
        operation: Op,
        timeout: Duration,
        wrote: bool,
    ) -> std::result::Result<(), Failed> {
        match self.sync_replicas(pool, &mut conn, operation.name(), timeout, wrote) {
            Ok(()) => Ok(()),
            // A release happened whatever the replicas say, or whether asking them failed
            // (its reply is in): the lock is free on the master, and failing the unlock would
            // only make the caller retry it, or take a release that ran for one that did not.
            Err(failed) if operation == Op::Release => {
                if let Failed::Redis(err) = &failed {
                    if is_broken(err) {
                        conn.discard();
                    }
                }
                log::warn!("release at {}: {failed:?}", pool.addr());
                Ok(())
            }
            // The acquire took its hold, and whether a replica has it is unknown (the reply
            // was lost, or WAIT was refused): the caller rolls it back as it does when none
            // acknowledged (a plain error would leave a hold that nobody releases or renews).
            Err(Failed::Redis(err)) if wrote && operation == Op::Acquire => {
                if is_broken(&err) {
                    conn.discard();
                }
                log::warn!(
                    "acquire at {}: no replica acknowledgement could be read ({err})",
                    pool.addr()
                );
                Err(Failed::Other(Error::NotReplicated {
                    operation: operation.name(),
                    replicas: pool.replicas(),
                    timeout,
                }))
            }
            Err(failed) => {
                if matches!(failed, Failed::Redis(_)) {
                    conn.discard();
                }
                Err(failed)
            }
        }
    }

    /// Runs `op` on `conn` with its replies due by `deadline`.
    fn call<T>(
        &self,
        conn: &mut Connection,
        commands: u64,
        deadline: Instant,
        asking: bool,
        op: &impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        // The socket's timeout applies to each read, and redis-rs reads every reply of a
        // pipeline even after one timed out: with a paused server, `commands` replies cost
        // `commands` timeouts. Each reply gets its share of the time left.
        let left = deadline.saturating_duration_since(Instant::now());
        let commands = u32::try_from(commands.max(1)).unwrap_or(u32::MAX);
        let per_reply = (left.min(self.response_timeout) / commands).max(Duration::from_millis(1));
        // Setting the timeout costs two system calls: only when it is shorter by more than the
        // few milliseconds that waiting for the connection took.
        let shortened = per_reply + READ_TIMEOUT_SLACK < self.response_timeout;
        if shortened {
            conn.set_read_timeout(Some(per_reply))?;
        }
        let result = if asking {
            redis::cmd("ASKING")
                .query::<()>(conn)
                .and_then(|()| op(conn))
        } else {
            op(conn)
        };
        if shortened && !result.as_ref().is_err_and(is_broken) {
            conn.set_read_timeout(Some(self.response_timeout))?;
        }
        result
    }
}

/// Plain `PUBLISH` of `message` on `channel`; replies how many connections heard it.
fn publish_query(conn: &mut Connection, channel: &str, message: &str) -> RedisResult<i64> {
    redis::cmd("PUBLISH").arg(channel).arg(message).query(conn)
}

/// How much longer than its budget a call may take rather than pay two system calls to
/// shorten its read timeout: the time it may spend getting a pooled connection.
const READ_TIMEOUT_SLACK: Duration = Duration::from_millis(5);

/// Where a command goes, and what its earlier sends met.
struct Route {
    pool: Arc<Pool>,
    /// The generation of the map `pool` was found in.
    generation: u64,
    /// `ASKING` first: the node is importing the key's slot (an ASK reply).
    asking: bool,
    /// MOVED, ASK and "non local key" replies followed so far.
    redirects: u32,
    /// What made the call look for the master again, last, and where: when the time runs
    /// out while it looks, that (the failover) is what the caller is told.
    failover: Option<(Failed, String)>,
}

/// The error of a command that the deadline left no time to send.
fn too_late(operation: Op) -> Failed {
    Failed::Other(Error::Timeout {
        operation: operation.name(),
        after: Duration::ZERO,
    })
}

/// Waits a little before a command is sent again while a failover is under way, within the
/// time left.
fn pause_before_asking_again(deadline: Instant) {
    std::thread::sleep(FAILOVER_RETRY.min(deadline.saturating_duration_since(Instant::now())));
}

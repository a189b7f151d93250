//! Renewal sweeps on the wire: the holds due, renewed with one pipeline per master, every
//! master's pipeline sent before any reply is read (docs/design/deployments.md, "Deployments", under
//! "Routing", and "The watchdog").
//!
//! A renewal only sets a TTL, so sending it again is always safe; what must not happen is
//! that one master, or one call, costs the others their renewals:
//! - A master that stalls holds up only its own pipeline: the others were sent already (when
//!   their pooled connection was at hand), and their replies wait in their sockets.
//! - Each call of a pipeline stands alone: an error reply (a slot moving under ASK, a script
//!   the server lost) costs that call's entries, never the whole master's.
//! - Calls redirected by MOVED or ASK, or refused with NOSCRIPT, are sent once more in the
//!   same sweep, to the node named (after `ASKING` for ASK) or with the script loaded.
//! - A call refused with CROSSSLOT (a cluster proxy in front of one endpoint, which wants a
//!   script's keys in one slot) is sent again in the same sweep cut into one call per slot,
//!   and that endpoint's calls are cut by slot from then on (`Pool::splits_by_slot`).
//! - A call refused with "non local key" (a managed cluster behind one endpoint, under load:
//!   nothing ran) is sent again in the same sweep, as after a redirection.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use super::{is_broken, is_dead_connection, is_not_local, LockStore, Op};
use crate::error::{Error, Result};
use crate::store::scripts::Script;
use crate::topology::pool::{Pool, PooledConnection};

/// The shortest read timeout a pipeline's replies get: after the sweep's deadline, replies
/// already in the socket are still read (their renewals happened), and no more are waited for.
const READ_AFTER_DEADLINE: Duration = Duration::from_millis(1);

/// How long a sweep waits for each reply of a master whose last command timed out, where
/// masters can be replaced: a stopped master is replaced seconds after it stops (a cluster's
/// node timeout and election, the sentinels' down-after), and its holds' leases run out a few
/// seconds after that at worst. The watchdog must not spend that time waiting for the stopped
/// master: its sweeps come back to it (and ask the deployment first) every so often instead.
const SILENT_READ: Duration = Duration::from_millis(500);

/// One pipeline of renewal calls for one node.
struct Target {
    pool: Arc<Pool>,
    /// `ASKING` before each call: the node is importing the calls' slots (an ASK reply).
    asking: bool,
    /// Each call's entries, as indices into the batch.
    calls: Vec<Vec<usize>>,
}

/// A call to send again in the same sweep.
struct Again {
    pool: Arc<Pool>,
    asking: bool,
    call: Vec<usize>,
}

impl Target {
    /// `call`, to send again to this target.
    fn again(&self, call: Vec<usize>) -> Again {
        Again {
            pool: Arc::clone(&self.pool),
            asking: self.asking,
            call,
        }
    }
}

/// A call's replies, one per entry. A reply that does not match the request must not mark
/// holds lost: it is sent again.
fn record_renewed(target: &Target, call: &[usize], flags: &[i64], renewed: &mut [Option<bool>]) {
    if flags.len() != call.len() {
        log::warn!(
            "lock renewal at {}: {} replies for {} locks; retrying",
            target.pool.addr(),
            flags.len(),
            call.len()
        );
        return;
    }
    for (&i, &flag) in call.iter().zip(flags) {
        renewed[i] = Some(flag == 1);
    }
}

/// A call refused across slots, sent again as one call per slot; the node is renewed so
/// from now on.
fn split_by_slot(
    target: &Target,
    err: &RedisError,
    calls: Vec<Vec<usize>>,
    again: &mut Vec<Again>,
) {
    if !target.pool.splits_by_slot_from_now() {
        log::info!(
            "lock renewal at {}: calls across slots are refused ({err}); renewing one slot per \
             call there",
            target.pool.addr()
        );
    }
    again.extend(calls.into_iter().map(|call| target.again(call)));
}

/// Counts a refused call's locks (the first refusal is the one reported).
fn count_refused(refused: &mut Option<(usize, RedisError)>, call: &[usize], err: RedisError) {
    let (count, _) = refused.get_or_insert((0, err));
    *count += call.len();
}

/// What became of one call of a pipeline.
enum CallOutcome {
    /// Per entry, 1 when the hold was there and renewed.
    Renewed(Vec<i64>),
    /// MOVED or ASK: the node's address, and whether it is ASK.
    Redirected(String, bool),
    /// The server has no such script (a restart, a failover to a node that never loaded it).
    NoScript,
    /// The keys span slots, which the server (a cluster proxy) refuses.
    CrossSlot(RedisError),
    /// The endpoint sent the script to a node that does not serve its keys: ask again.
    NotLocal,
    /// Any other error reply: the entries are tried again at the next sweep.
    Refused(RedisError),
}

/// Redis allows many keys per script call, but a renewal script runs while the server does
/// nothing else; 100 keys keeps each call short (Redisson uses the same batch size).
const RENEW_KEYS_PER_CALL: usize = 100;

impl LockStore {
    /// Renews `batch`'s `(key, owner)` entries with `script`, called as the lock kinds' renewal
    /// scripts take them: `KEYS` the keys, `ARGV[1]` the lease ms, `ARGV[i + 1]` the owner of
    /// `KEYS[i]`; at most [`RENEW_KEYS_PER_CALL`] keys a call, through
    /// [`per_master`](Self::per_master).
    pub(crate) fn renew_owned(
        &self,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
        script: &Script,
    ) -> Vec<Option<bool>> {
        self.per_master(batch, budget, RENEW_KEYS_PER_CALL, script, |pipe, chunk| {
            let mut call = script.prepare_invoke();
            for (key, _) in chunk {
                call.key(*key);
            }
            call.arg(timeout_ms);
            for (_, owner) in chunk {
                call.arg(*owner);
            }
            call.add_to(pipe);
        })
    }

    /// Renews the entries of `batch` with one pipeline per master, all masters' pipelines
    /// sent before any reply is read, all within `budget` (see the module's docs). `call`
    /// adds one call of `script` for a chunk of entries to a pipeline, and that call's reply
    /// is a list of 0/1, one per entry, in order. A chunk has at most `per_call` entries, and
    /// on a cluster all of one slot (a script's keys must share a slot there). Entries whose
    /// master did not answer are left `None`, for the watchdog to try again.
    pub(crate) fn per_master(
        &self,
        batch: &[(&str, &str)],
        budget: Duration,
        per_call: usize,
        script: &Script,
        call: impl Fn(&mut redis::Pipeline, &[(&str, &str)]),
    ) -> Vec<Option<bool>> {
        let deadline = Instant::now() + budget;
        let mut renewed = vec![None; batch.len()];
        let mut map = self.topology.map();
        let mut targets = self.renewal_targets(&map, batch, per_call);
        let silent = targets.iter().any(|t| t.pool.is_silent());
        if (targets.is_empty() && !batch.is_empty())
            || (silent && self.topology.capabilities().masters_move)
        {
            // No master for some slots, or one that went silent (stopped, maybe replaced by
            // now): asked first (the silent one last), so that the renewals go to the
            // promoted replica as soon as it serves the slots.
            self.topology.refresh_by(map.generation, deadline);
            map = self.topology.map();
            targets = self.renewal_targets(&map, batch, per_call);
        }
        let round = Round {
            store: self,
            batch,
            script,
            call: &call,
            deadline,
            refresh: Cell::new(false),
        };
        let again = round.run(&targets, &mut renewed);
        if !again.is_empty() && Instant::now() < deadline {
            // Once more, where the servers said; what fails again waits for the next sweep.
            let mut targets: Vec<Target> = Vec::new();
            for Again { pool, asking, call } in again {
                match targets
                    .iter_mut()
                    .find(|t| Arc::ptr_eq(&t.pool, &pool) && t.asking == asking)
                {
                    Some(target) => target.calls.push(call),
                    None => targets.push(Target {
                        pool,
                        asking,
                        calls: vec![call],
                    }),
                }
            }
            let left = round.run(&targets, &mut renewed);
            if !left.is_empty() {
                log::debug!(
                    "lock renewal: {} calls redirected twice; retrying at the next sweep",
                    left.len()
                );
            }
        }
        if round.refresh.get() {
            // Only now: discovery asks the known masters first, a silent one among them, and
            // must not hold up reading the others' replies. The sweep's deadline may have
            // passed (a stalled master): the search may still take one response timeout to
            // start, behind another thread's.
            self.topology
                .refresh_by(map.generation, Instant::now() + self.response_timeout);
        }
        renewed
    }

    /// The batch's entries grouped by their master in `map`, and cut into calls: at most
    /// `per_call` entries each, and on a cluster (or an endpoint that refused a call across
    /// slots) all of one slot.
    fn renewal_targets(
        &self,
        map: &crate::topology::Map,
        batch: &[(&str, &str)],
        per_call: usize,
    ) -> Vec<Target> {
        let cluster = self.topology.capabilities().routes_by_slot;
        let mut groups: Vec<(Arc<Pool>, Vec<usize>)> = Vec::new();
        for (i, (name, _)) in batch.iter().enumerate() {
            let Some(pool) = map.master_for(name) else {
                continue; // no master for the slot now: next sweep
            };
            match groups.iter_mut().find(|(p, _)| Arc::ptr_eq(p, pool)) {
                Some((_, entries)) => entries.push(i),
                None => groups.push((Arc::clone(pool), vec![i])),
            }
        }
        groups
            .into_iter()
            .map(|(pool, mut entries)| {
                let by_slot = cluster || pool.splits_by_slot();
                let slot_of = |i: usize| by_slot.then(|| crate::slot::of(batch[i].0.as_bytes()));
                if by_slot {
                    entries.sort_by_key(|&i| slot_of(i));
                }
                let mut calls: Vec<Vec<usize>> = Vec::new();
                for i in entries {
                    match calls.last_mut() {
                        Some(last) if last.len() < per_call && slot_of(last[0]) == slot_of(i) => {
                            last.push(i)
                        }
                        _ => calls.push(vec![i]),
                    }
                }
                Target {
                    pool,
                    asking: false,
                    calls,
                }
            })
            .collect()
    }
}

/// One round of a renewal sweep: what every target's pipeline is made of, and its deadline.
struct Round<'a, F> {
    store: &'a LockStore,
    batch: &'a [(&'a str, &'a str)],
    script: &'a Script,
    call: &'a F,
    deadline: Instant,
    /// A reply said the masters moved (MOVED, READONLY, ...) or one refused connections: the
    /// deployment is asked again once the sweep is done.
    refresh: Cell<bool>,
}

impl<F: Fn(&mut redis::Pipeline, &[(&str, &str)])> Round<'_, F> {
    /// Sends every target's pipeline, then reads each one's replies into `renewed`. Returns
    /// the calls to send again (redirected, or refused for a missing script).
    ///
    /// Targets with an idle connection at hand go first, all written before any reply is
    /// read; then the others, each connecting in turn: a master that answers nothing (its
    /// connection was dropped after the last sweep timed out) must not cost the rest the
    /// time it takes to fail connecting.
    fn run(&self, targets: &[Target], renewed: &mut [Option<bool>]) -> Vec<Again> {
        let mut sent = Vec::with_capacity(targets.len());
        let mut unconnected = Vec::new();
        for target in targets {
            if Instant::now() >= self.deadline {
                self.failed(target, target.entries(), &self.too_late());
                continue;
            }
            let packed = self.pipeline(target).get_packed_pipeline();
            match target.pool.get_idle() {
                Ok(Some(mut conn)) => match self.write(target, &mut conn, &packed) {
                    Ok(()) => sent.push((target, packed, conn)),
                    Err(_) => {
                        // Dead while idle (a restart, a timeout on the server's side), or
                        // part of the pipeline went out: the connection's state is unknown.
                        // The pipeline goes out again on a new connection below.
                        conn.discard();
                        unconnected.push((target, packed));
                    }
                },
                Ok(None) => unconnected.push((target, packed)),
                Err(err) => self.failed(target, target.entries(), &err),
            }
        }
        let mut again = Vec::new();
        for (target, packed, conn) in sent {
            self.read(target, &packed, conn, renewed, &mut again);
        }
        for (target, packed) in unconnected {
            match self.connect_and_write(target, &packed) {
                Ok(conn) => self.read(target, &packed, conn, renewed, &mut again),
                Err(err) => self.failed(target, target.entries(), &err),
            }
        }
        again
    }

    /// The target's pipeline: one script call per chunk, each after `ASKING` when asked.
    fn pipeline(&self, target: &Target) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for call in &target.calls {
            if target.asking {
                pipe.cmd("ASKING");
            }
            let chunk: Vec<(&str, &str)> = call.iter().map(|&i| self.batch[i]).collect();
            (self.call)(&mut pipe, &chunk);
        }
        pipe
    }

    /// Writes the pipeline on a new or waiting pooled connection to the target's node.
    fn connect_and_write<'t>(
        &self,
        target: &'t Target,
        packed: &[u8],
    ) -> Result<PooledConnection<'t>> {
        let mut conn = target.pool.get_by(self.deadline)?;
        if let Err(err) = self.write(target, &mut conn, packed) {
            conn.discard();
            return Err(err);
        }
        Ok(conn)
    }

    /// Writes the pipeline by the deadline. On an error the connection's state is unknown
    /// (part of the pipeline may have gone out, with replies to come): the caller discards it.
    fn write(&self, target: &Target, conn: &mut PooledConnection<'_>, packed: &[u8]) -> Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.too_late());
        }
        let response_timeout = self.store.response_timeout;
        let classify = |source| self.store.classify(Op::Renew, "", source);
        // A server that stopped reading fills the socket's buffers: a large pipeline's write
        // must not block past the deadline either.
        conn.set_write_timeout(Some(left.min(response_timeout)))
            .map_err(classify)?;
        let calls = target.calls.len() as u64;
        self.store
            .counters
            .sent(if target.asking { 2 * calls } else { calls });
        conn.send_packed_command(packed).map_err(classify)?;
        conn.set_write_timeout(Some(response_timeout))
            .map_err(classify)
    }

    /// Reads the target's replies into `renewed`, and queues in `again` the calls to send once
    /// more. A pooled connection that turns out dead before any reply (a restart) is replaced
    /// once; replies read before a failure count.
    fn read<'t>(
        &self,
        target: &'t Target,
        packed: &[u8],
        mut conn: PooledConnection<'t>,
        renewed: &mut [Option<bool>],
        again: &mut Vec<Again>,
    ) {
        let mut replaced = false;
        loop {
            let (outcomes, failure) = self.replies(target, &mut conn);
            let Some(err) = failure else {
                self.apply(target, outcomes, Some(conn), renewed, again);
                return;
            };
            let retry = outcomes.is_empty() && conn.reused && !replaced && is_dead_connection(&err);
            conn.discard(); // its state is unknown
            if !retry {
                let read = outcomes.len();
                // What was read counts: those renewals happened.
                self.apply(target, outcomes, None, renewed, again);
                let unread: usize = target.calls[read..].iter().map(Vec::len).sum();
                self.failed(target, unread, &self.store.classify(Op::Renew, "", err));
                return;
            }
            replaced = true;
            conn = match self.connect_and_write(target, packed) {
                Ok(fresh) => {
                    self.store.counters.reconnect();
                    fresh
                }
                Err(err) => {
                    self.failed(target, target.entries(), &err);
                    return;
                }
            };
        }
    }

    /// Reads one reply per call (and the `ASKING` replies before them), each waiting at most
    /// until the deadline; after it, only what has arrived already. Returns the outcomes read,
    /// and the error that stopped the reading, if one did (then the connection is unusable).
    fn replies(
        &self,
        target: &Target,
        conn: &mut PooledConnection<'_>,
    ) -> (Vec<CallOutcome>, Option<RedisError>) {
        let response_timeout = self.store.response_timeout;
        let mut outcomes = Vec::with_capacity(target.calls.len());
        let mut timeout = Duration::MAX;
        for _ in &target.calls {
            // The socket's timeout applies to each read: it is cut down as the deadline comes
            // closer (halving at most, so a few system calls per pipeline), so that no read
            // waits much past it.
            let left = self
                .deadline
                .saturating_duration_since(Instant::now())
                .clamp(READ_AFTER_DEADLINE, self.read_timeout(target));
            if left < timeout / 2 || timeout == Duration::MAX {
                timeout = left;
                if let Err(err) = conn.set_read_timeout(Some(timeout)) {
                    return (outcomes, Some(err));
                }
            }
            let reply = if target.asking {
                // `OK`; were it refused, the call's own reply says why.
                conn.recv_response().and_then(|_| conn.recv_response())
            } else {
                conn.recv_response()
            };
            match reply {
                Ok(reply) => {
                    target.pool.answered();
                    outcomes.push(CallOutcome::of(reply));
                }
                Err(err) => {
                    if err.is_timeout() {
                        target.pool.went_silent();
                    }
                    return (outcomes, Some(err));
                }
            }
        }
        // The connection goes back to the pool with the timeout every call expects.
        let restored = conn.set_read_timeout(Some(response_timeout));
        (outcomes, restored.err())
    }

    /// Applies the outcomes of the target's first calls (all of them, unless reading stopped
    /// early) to `renewed`; queues calls redirected, or refused for a missing script, in
    /// `again`. `conn` is the connection they came on, if it is still usable (a missing
    /// script is loaded there).
    fn apply(
        &self,
        target: &Target,
        outcomes: Vec<CallOutcome>,
        conn: Option<PooledConnection<'_>>,
        renewed: &mut [Option<bool>],
        again: &mut Vec<Again>,
    ) {
        let mut refused: Option<(usize, RedisError)> = None;
        let mut no_script = Vec::new();
        for (call, outcome) in target.calls.iter().zip(outcomes) {
            match outcome {
                CallOutcome::Renewed(flags) => record_renewed(target, call, &flags, renewed),
                CallOutcome::Redirected(addr, ask) => self.redirected(&addr, ask, call, again),
                CallOutcome::NoScript => no_script.push(call.clone()),
                CallOutcome::NotLocal => {
                    if self.store.topology.capabilities().masters_move {
                        self.refresh.set(true);
                    }
                    again.push(target.again(call.clone()));
                }
                CallOutcome::CrossSlot(err) => match self.by_slot(call) {
                    Some(calls) => split_by_slot(target, &err, calls, again),
                    None => count_refused(&mut refused, call, err),
                },
                CallOutcome::Refused(err) => count_refused(&mut refused, call, err),
            }
        }
        if !no_script.is_empty() && self.load_script(target, conn) {
            again.extend(no_script.into_iter().map(|call| target.again(call)));
        }
        if let Some((count, err)) = refused {
            if self.store.topology.capabilities().masters_move && means_moving(&err) {
                self.refresh.set(true);
            }
            log::warn!(
                "lock renewal of {count} locks at {} refused: {err}; retrying",
                target.pool.addr()
            );
        }
    }

    /// A call the node at `addr` serves (MOVED), or is importing (ASK): sent there.
    fn redirected(&self, addr: &str, ask: bool, call: &[usize], again: &mut Vec<Again>) {
        if !ask {
            self.refresh.set(true);
        }
        match self.store.topology.node(addr) {
            Ok(pool) => again.push(Again {
                pool,
                asking: ask,
                call: call.to_vec(),
            }),
            Err(err) => log::warn!("lock renewal: redirected to {addr}: {err}"),
        }
    }

    /// `call` cut into one call per slot of its keys, or `None` when it has one slot only
    /// (a CROSSSLOT for it is not about slots).
    fn by_slot(&self, call: &[usize]) -> Option<Vec<Vec<usize>>> {
        let mut calls: Vec<(u16, Vec<usize>)> = Vec::new();
        for &i in call {
            let slot = crate::slot::of(self.batch[i].0.as_bytes());
            match calls.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, entries)) => entries.push(i),
                None => calls.push((slot, vec![i])),
            }
        }
        (calls.len() > 1).then(|| calls.into_iter().map(|(_, call)| call).collect())
    }

    /// Loads the script on `conn` (the server lost it: a restart, a failover), within the
    /// time left; whether it worked. Without time or a usable connection, the calls wait for
    /// the next sweep.
    fn load_script(&self, target: &Target, conn: Option<PooledConnection<'_>>) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let (Some(mut conn), false) = (conn, left.is_zero()) else {
            return false;
        };
        self.store.counters.sent(1);
        let loaded = conn
            .set_read_timeout(Some(left.min(self.store.response_timeout)))
            .and_then(|()| self.script.load(&mut *conn))
            .and_then(|_| conn.set_read_timeout(Some(self.store.response_timeout)));
        match loaded {
            Ok(()) => true,
            Err(err) => {
                log::warn!(
                    "lock renewal: loading the script at {}: {err}",
                    target.pool.addr()
                );
                if is_broken(&err) {
                    conn.discard();
                }
                false
            }
        }
    }

    /// `count` of the target's entries got no reply: they wait for the next sweep.
    fn failed(&self, target: &Target, count: usize, err: &Error) {
        log::warn!(
            "lock renewal of {count} locks at {} failed: {err}; retrying",
            target.pool.addr()
        );
        // A master that refuses connections, or went silent (stopped, see `Pool::is_silent`),
        // may have been replaced: ask where the masters are (after the sweep, at most every
        // so often; discovery asks a silent master last, so it does not hold the watchdog).
        if self.store.topology.capabilities().masters_move
            && (err.is_connection_error() || target.pool.is_silent())
        {
            self.refresh.set(true);
        }
    }

    /// How long one reply of `target` is waited for: a response timeout, or
    /// [`SILENT_READ`] once its master went silent.
    fn read_timeout(&self, target: &Target) -> Duration {
        let response_timeout = self.store.response_timeout;
        if target.pool.is_silent() && self.store.topology.capabilities().masters_move {
            response_timeout.min(SILENT_READ)
        } else {
            response_timeout
        }
    }

    /// The error of a target that the sweep's deadline left no time for.
    fn too_late(&self) -> Error {
        Error::Timeout {
            operation: Op::Renew.name(),
            after: Duration::ZERO,
        }
    }
}

impl Target {
    /// How many entries its calls renew.
    fn entries(&self) -> usize {
        self.calls.iter().map(Vec::len).sum()
    }
}

impl CallOutcome {
    fn of(reply: Value) -> Self {
        let err = match reply {
            Value::ServerError(err) => RedisError::from(err),
            value => {
                return match redis::from_redis_value::<Vec<i64>>(value) {
                    Ok(flags) => CallOutcome::Renewed(flags),
                    Err(err) => CallOutcome::Refused(err.into()),
                }
            }
        };
        match err.code() {
            Some(code @ ("MOVED" | "ASK")) => match err.redirect_node() {
                Some((addr, _)) => CallOutcome::Redirected(addr.to_owned(), code == "ASK"),
                None => CallOutcome::Refused(err),
            },
            Some("NOSCRIPT") => CallOutcome::NoScript,
            Some("CROSSSLOT") => CallOutcome::CrossSlot(err),
            _ if is_not_local(&err) => CallOutcome::NotLocal,
            _ => CallOutcome::Refused(err),
        }
    }
}

/// An error reply that says the master is moving (a failover, a resharding).
fn means_moving(err: &RedisError) -> bool {
    matches!(
        err.code(),
        Some("READONLY" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN")
    )
}

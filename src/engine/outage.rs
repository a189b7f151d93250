//! How long a thread already waiting (for a lock, a permit, a count) rides out Redis not
//! answering before it reports it: the *outage grace* (docs/design/engine.md, "Outage grace").
//!
//! On one server an outage is a restart or a server gone: one connect timeout is enough for
//! the first and keeps the second from hiding behind a long wait. With Sentinel or a cluster
//! a master that stops answering is most likely being replaced, which takes the sentinels'
//! or the cluster's failure detection and an election (seconds to a minute with the
//! defaults): a waiter rides it out within its own wait, up to [`FAILOVER_GRACE`] for a wait
//! without limit. There a master that hangs (stopped, a stalled VM) is replaced as a dead one
//! is, and all it shows is commands that time out: a timeout is ridden out too, by waiters
//! whose attempts are safe to send again (an acquire's attempt id, a read). And a call that
//! has a wait rides out an outage from its first attempt on, as one already waiting does.

use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::error::{Error, Result};

/// How long a waiter on Sentinel or a cluster rides out its master not answering, at most:
/// longer than a failover with Redis' defaults (Sentinel's 30 s down-after and a cluster's
/// 15 s node timeout, each with the election after it).
pub(crate) const FAILOVER_GRACE: Duration = Duration::from_secs(60);

/// One waiter's outage: since when Redis has not answered it, and for how long it may not.
pub(crate) struct Outage {
    grace: Duration,
    /// Masters can be replaced here (Sentinel, a cluster): an acquire rolled back because no
    /// replica acknowledged it, or because its master was not vouched for, is a failover
    /// under way too, and is ridden out as one.
    failovers: bool,
    /// Where masters can be replaced, a timeout is ridden out too: the waiter's attempts are
    /// safe to send again after a lost reply (see [`Outage::resending`]).
    timeouts: bool,
    /// The outage grace of one server, past which a wait that ends during an outage reports
    /// it rather than "not acquired" (see [`Outage::at_deadline`]).
    reported_after: Duration,
    since: Option<Instant>,
    last: Option<Error>,
    /// Redis has not answered since the call's first attempt: a wait that ends so reports
    /// the outage, however short it was (a "not acquired" would hide that nothing was asked).
    unanswered: bool,
}

impl Outage {
    /// The outage of a waiter of `engine`'s deployment.
    pub(crate) fn of(engine: &Engine) -> Self {
        let connect_timeout = engine.config().connect_timeout;
        let failovers = engine.store().topology().capabilities().masters_move;
        let grace = if failovers {
            FAILOVER_GRACE.max(connect_timeout)
        } else {
            connect_timeout
        };
        Outage {
            grace,
            failovers,
            timeouts: false,
            reported_after: connect_timeout,
            since: None,
            last: None,
            unanswered: false,
        }
    }

    /// For a waiter whose attempts may be sent again after a lost reply, without taking
    /// twice (an acquire's attempt id, a semaphore's, a read): where masters can be replaced,
    /// a timeout is an outage too (a stopped master, being replaced).
    pub(crate) fn resending(mut self) -> Self {
        self.timeouts = self.failovers;
        self
    }

    /// Takes the error of a call's first attempt, before it waited: `Ok` where masters can be
    /// replaced and it is an outage (the caller goes on to wait, and rides it out within its
    /// wait), else the error, at once (one server down is reported without delay).
    pub(crate) fn ride_out_first(&mut self, name: &str, err: Error) -> Result<()> {
        if !self.failovers {
            return Err(err);
        }
        self.ride_out(name, err)?;
        self.unanswered = true;
        Ok(())
    }

    /// Takes an attempt's error: `Ok` while it is an outage within the grace (the caller looks
    /// again soon), else the error.
    pub(crate) fn ride_out(&mut self, name: &str, err: Error) -> Result<()> {
        let failover = self.failovers && err.is_not_replicated();
        let silent = self.timeouts && err.is_timeout();
        if !(err.is_outage() || failover || silent) {
            return Err(err);
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.grace {
            return Err(err);
        }
        log::debug!("{name:?}: {err}; waiting for Redis to come back");
        self.last = Some(err);
        Ok(())
    }

    /// Redis answered: the outage, if any, is over.
    pub(crate) fn over(&mut self) {
        self.since = None;
        self.last = None;
        self.unanswered = false;
    }

    /// The wait ended: `Ok(false)` ("not acquired"), unless Redis has not answered for longer
    /// than one server's grace, or not at all in this call, which is then reported (Redis
    /// down is an error, also when a long wait ends first).
    pub(crate) fn at_deadline(&mut self) -> Result<bool> {
        match (self.since, self.last.take()) {
            (Some(since), Some(err))
                if self.unanswered || since.elapsed() >= self.reported_after =>
            {
                Err(err)
            }
            _ => Ok(false),
        }
    }
}

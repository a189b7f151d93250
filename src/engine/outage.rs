//! How long a thread already waiting (for a lock, a permit, a count) rides out Redis not
//! answering before it reports it: the *outage grace* (docs/design/engine.md, "Outage grace").
//!
//! On one server an outage is a restart or a server gone: one connect timeout is enough for
//! the first and keeps the second from hiding behind a long wait. With Sentinel or a cluster
//! a master that stops answering is most likely being replaced, which takes the sentinels'
//! or the cluster's failure detection and an election (seconds to a minute with the
//! defaults): a waiter rides it out within its own wait, up to [`FAILOVER_GRACE`] for a wait
//! without limit.

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
    /// The outage grace of one server, past which a wait that ends during an outage reports
    /// it rather than "not acquired" (see [`Outage::at_deadline`]).
    reported_after: Duration,
    since: Option<Instant>,
    last: Option<Error>,
}

impl Outage {
    /// The outage of a waiter of `engine`'s deployment.
    pub(crate) fn of(engine: &Engine) -> Self {
        let connect_timeout = engine.config().connect_timeout;
        let failovers = engine.store().topology().follows_failovers();
        let grace = if failovers {
            FAILOVER_GRACE.max(connect_timeout)
        } else {
            connect_timeout
        };
        Outage {
            grace,
            failovers,
            reported_after: connect_timeout,
            since: None,
            last: None,
        }
    }

    /// Takes an attempt's error: `Ok` while it is an outage within the grace (the caller looks
    /// again soon), else the error.
    pub(crate) fn ride_out(&mut self, name: &str, err: Error) -> Result<()> {
        if !(err.is_outage() || (self.failovers && err.is_not_replicated())) {
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
    }

    /// The wait ended: `Ok(false)` ("not acquired"), unless Redis has not answered for longer
    /// than one server's grace, which is then reported (Redis down is an error, also when a
    /// long wait ends first).
    pub(crate) fn at_deadline(&mut self) -> Result<bool> {
        match (self.since, self.last.take()) {
            (Some(since), Some(err)) if since.elapsed() >= self.reported_after => Err(err),
            _ => Ok(false),
        }
    }
}

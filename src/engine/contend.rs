//! The wait in Redis, for the thread with the turn (or every thread of a kind without the
//! line): attempt; on failure subscribe to the lock's channel, attempt again (a release may
//! have been announced before the subscription), then sleep until an unlock message, a
//! handoff or grant to this wait, a back-off look, or the holder's TTL, and repeat. A kind
//! whose releases are silent (a spin lock) only sleeps its back-off and looks again. Both
//! are also woken when the server reports a change of the lock key (client tracking,
//! `crate::pubsub::tracking`): a release nobody announces, an expiry, a `DEL`; with it, the
//! back-off is a long safety net. A spin-lock waiter has the key watched from its start; a
//! subscribed waiter once its wait has lasted [`TRACK_AFTER`] without a message.
//!
//! A waiter rides out an outage (a restart, its data loading back, a failover) for the outage
//! grace ([`crate::engine::outage`]), woken when the listener is back; past that the outage is
//! reported. Redis down for good is still an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::attempter::Attempter;
use super::plan::{AcquirePlan, Listen};
use super::{Engine, NO_TTL_POLL, OUTAGE_RETRY};
use crate::backoff::{Backoff, SpinBackoff};
use crate::clock::BootInstant;
use crate::engine::line::{Entry, Yield};
use crate::error::Result;
use crate::names::LockKeys;
use crate::pubsub::subscriber::Subscription;
use crate::stop::Stop;
use crate::store::Attempt;

/// How long a subscribed waiter waits for an unlock message (and looks once by its back-off)
/// before it also has the server watch the lock key. Most holders announce their release,
/// and most waits behind them are shorter: tracking them would only add an invalidation per
/// change of the key (measured in BENCHMARKS.md); a silent release within this time is found
/// by that first look.
const TRACK_AFTER: Duration = Duration::from_millis(100);

/// Where a contending thread starts.
pub(super) enum Contention {
    /// Attempt first: it waited in line, and the lock may be free by now.
    Look,
    /// It attempted just now: subscribe before attempting again.
    AfterAttempt,
    /// Others were told the lock is free: give them the first go (see [`Yield`]).
    Yield(Yield),
}

/// What one look in the wait found.
enum Looked {
    Acquired,
    /// Not yet: sleep by this TTL of the holder's (ms; `None`: the key has none).
    Held(Option<u64>),
}

impl Engine {
    /// Contends until acquired (`Ok(true)`), the deadline (`Ok(false)`) or the stop (its
    /// error).
    pub(super) fn contend(
        &self,
        plan: &AcquirePlan,
        start: Contention,
        stop: &Stop,
        attempter: &mut Attempter<'_>,
    ) -> Result<bool> {
        stop.check()?;
        if matches!(start, Contention::Look) {
            // Only a thread that waited in line gets here: it rides out an outage (the loop
            // below looks again).
            match attempter.attempt() {
                Ok(attempt) if attempt.is_acquired() => return Ok(true),
                Ok(_) => attempter.outage.over(),
                Err(err) => attempter.outage.ride_out(&attempter.keys.name, err)?,
            }
        }
        let deadline = attempter.request.deadline;
        if passed(deadline) {
            return attempter.outage.at_deadline();
        }
        if plan.listen == Listen::Spin {
            return self.spin(start, stop, attempter);
        }
        let channel = attempter.kind.channel(attempter.keys, &attempter.owner);
        let mut subscription = self.subscriber.subscribe(&channel, deadline, stop);
        stop.check()?;
        if passed(deadline) {
            // Subscribing took the rest of the wait (a slow server): no attempt after it.
            return attempter.outage.at_deadline();
        }
        let yielding = match start {
            Contention::Yield(yielded) => {
                Some(self.wait_out_yield(yielded, &channel, &subscription, deadline, stop))
            }
            Contention::Look | Contention::AfterAttempt => None,
        };
        if plan.registers_for_grants {
            self.register_for_grants(&channel, &subscription, attempter);
        }
        // The stop is looked at after each sleep (the subscription's waker ends the sleep); a
        // grant that raced with it is found when the registration ends, and given back by the
        // caller.
        let outcome = stop
            .check()
            .and_then(|()| self.wait_in_redis(&mut subscription, &channel, yielding, attempter));
        self.end_registration(outcome, attempter)
    }

    /// Gives remote waiters, who were told the lock is free, the first go: until the window
    /// ends, the deadline, the stop, or one of them has had the lock and let it go (an unlock
    /// message beyond the one this manager's own release sent its still-subscribed listener).
    /// Returns the message count the first look compares against.
    fn wait_out_yield(
        &self,
        yielded: Yield,
        channel: &str,
        subscription: &Subscription,
        deadline: Option<Instant>,
        stop: &Stop,
    ) -> u64 {
        let until = deadline.map_or(yielded.until, |d| d.min(yielded.until));
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero()
                || stop.is_stopped()
                || self.subscriber.message_count(channel) > yielded.messages_expected
            {
                return yielded.messages_expected;
            }
            subscription.wait(left);
        }
    }

    /// The loop of [`contend`](Self::contend) once subscribed: look, and sleep until a
    /// release message, a handoff or a grant to this wait, or the holder's TTL.
    fn wait_in_redis(
        &self,
        subscription: &mut Subscription,
        channel: &str,
        mut yielding: Option<u64>,
        attempter: &mut Attempter<'_>,
    ) -> Result<bool> {
        // A grant can only follow this wait's first registration: its lease counts from no
        // earlier than this.
        let registered_from = BootInstant::now();
        // A release nobody announced (a spin lock's, a deleted key) is found by looking again,
        // and once the wait has lasted `TRACK_AFTER`, reported by client tracking.
        let mut backoff = Backoff::new(attempter.thread);
        let track_from = Instant::now() + TRACK_AFTER;
        // When the holder's lease, as last seen, ends.
        let mut holder_until = None;
        loop {
            if subscription.key().is_none() && Instant::now() >= track_from {
                // Confirmed before the look below, which closes the race with a release
                // before the tracking.
                let deadline = attempter.request.deadline;
                self.subscriber
                    .track(subscription, &attempter.keys.name, deadline);
                if subscription.is_tracked() {
                    backoff = Backoff::tracked(attempter.thread);
                }
            }
            self.follow_listener(channel, attempter);
            // The first pass closes the race with a release announced before we subscribed.
            let holder_ttl =
                match self.look(channel, &mut yielding, &mut holder_until, attempter)? {
                    Looked::Acquired => return Ok(true),
                    Looked::Held(ttl) => ttl,
                };
            // A millisecond past the TTL: the server expires a key only once its time has
            // passed, so a look at the TTL itself (PTTL 0) finds it still there, again and
            // again within that millisecond.
            let mut sleep = holder_ttl
                .map_or(NO_TTL_POLL, |ttl| {
                    Duration::from_millis(ttl.saturating_add(1))
                })
                .min(backoff.next(self.subscriber.channel_count()));
            if let Some(deadline) = attempter.request.deadline {
                let now = Instant::now();
                if now >= deadline {
                    return attempter.outage.at_deadline();
                }
                sleep = sleep.min(deadline - now);
            }
            if self.sleep_parked(&*subscription, sleep, attempter) {
                return Ok(true);
            }
            if let Some(err) = subscription.stopped() {
                return Err(err);
            }
            if self.take_grant(&*subscription, registered_from, attempter) {
                return Ok(true);
            }
        }
    }

    /// One attempt of the wait. The first after a yield (`yielding`) tells the line how
    /// the yield went; `holder_until` follows the holder's lease as last seen.
    fn look(
        &self,
        channel: &str,
        yielding: &mut Option<u64>,
        holder_until: &mut Option<Instant>,
        attempter: &mut Attempter<'_>,
    ) -> Result<Looked> {
        match attempter.attempt() {
            Ok(Attempt::Acquired { .. }) => {
                if let Some(expected) = yielding.take() {
                    // Free after the window: nobody came, unless someone took it and let it
                    // go meanwhile (their unlock message says so).
                    let released_meanwhile = self.subscriber.message_count(channel) > expected;
                    self.line.yield_outcome(!released_meanwhile);
                }
                Ok(Looked::Acquired)
            }
            Ok(Attempt::HeldByOther(ttl)) => {
                if yielding.take().is_some() {
                    self.line.yield_outcome(false);
                }
                attempter.outage.over();
                *holder_until = ttl.map(|ms| Instant::now() + Duration::from_millis(ms));
                Ok(Looked::Held(ttl))
            }
            // A look of the back-off, while the holder's lease still runs, that a server no
            // longer answering (frozen) let time out: without the back-off nothing would have
            // been asked before the lease's end, so it is not reported yet (a look whose reply
            // was lost takes no second hold: the attempt id).
            Err(err) if err.is_timeout() && holder_until.is_some_and(|u| Instant::now() < u) => {
                log::debug!(
                    "lock {:?}: a look timed out ({err}); looking again",
                    attempter.keys.name
                );
                let left = holder_until.map(|u| u.saturating_duration_since(Instant::now()));
                Ok(Looked::Held(left.map(|left| left.as_millis() as u64)))
            }
            Err(err) => {
                attempter.outage.ride_out(&attempter.keys.name, err)?;
                Ok(Looked::Held(Some(OUTAGE_RETRY.as_millis() as u64)))
            }
        }
    }

    /// Sleeps on `subscription` for at most `sleep`, parked in the line (see `Line::park`):
    /// `true` when a release by another thread of this manager acquired the lock in this
    /// thread's name meanwhile.
    fn sleep_parked(
        &self,
        subscription: &Subscription,
        sleep: Duration,
        attempter: &mut Attempter<'_>,
    ) -> bool {
        let (keys, request): (&Arc<LockKeys>, _) = (attempter.keys, attempter.request);
        let parked = attempter.kind.takes_turns().is_some().then(|| {
            let nudge = subscription.nudger();
            self.line.park(
                keys,
                attempter.thread,
                request.lease_ms,
                request.fenced,
                nudge,
            )
        });
        subscription.wait(sleep);
        match parked.flatten().and_then(|parked| self.line.unpark(parked)) {
            Some(Entry::Acquired { sent }) => {
                attempter.given(sent.unwrap_or_else(BootInstant::now));
                true
            }
            // Only the turn, or a handoff whose outcome is unknown: the next attempt finds
            // out (as a fresh hold, it cannot count a second one).
            Some(Entry::Turn { .. } | Entry::Unconfirmed { .. }) | None => false,
        }
    }

    /// The wait of a kind whose releases are silent (a spin lock): no subscription, no
    /// message. Where the server watches the lock key (client tracking), sleep until it
    /// reports a change or a long safety back-off passes; elsewhere Redisson's spin back-off.
    /// Either way at most the wait left; then attempt, and repeat (the caller made the first
    /// attempt, unless it starts with a gap: see [`wait_out_gap`](Self::wait_out_gap); with
    /// tracking, the first attempt follows its confirmation at once, as a subscriber's does).
    /// An outage is ridden out as in [`wait_in_redis`](Self::wait_in_redis); the stop ends a
    /// sleep at once.
    fn spin(&self, start: Contention, stop: &Stop, attempter: &mut Attempter<'_>) -> Result<bool> {
        if let Contention::Yield(gap) = start {
            if self.wait_out_gap(gap, stop, attempter)? {
                return Ok(true);
            }
        }
        let deadline = attempter.request.deadline;
        let watch = self.subscriber.watch(&attempter.keys.name, deadline, stop);
        let mut sleeps = SpinSleeps::new(watch.is_tracked(), attempter.thread);
        let mut failed = false;
        loop {
            let mut sleep = sleeps.next();
            if failed {
                // An attempt that failed (an outage ridden out, a failover under way) is made
                // again soon, not after the tracked back-off: nothing reports its end.
                sleep = sleep.min(OUTAGE_RETRY);
            }
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    return attempter.outage.at_deadline();
                }
                sleep = sleep.min(deadline - now);
            }
            watch.wait(sleep);
            stop.check()?;
            failed = match attempter.attempt() {
                Ok(Attempt::Acquired { .. }) => return Ok(true),
                Ok(Attempt::HeldByOther(_)) => {
                    attempter.outage.over();
                    false
                }
                Err(err) => {
                    attempter.outage.ride_out(&attempter.keys.name, err)?;
                    true
                }
            };
        }
    }

    /// A spin lock's gap (see `crate::engine::runs`): sleeps until it ends (or the wait's
    /// deadline, or the stop), then attempts once, and tells the runs whether someone else
    /// took the lock meanwhile. `Ok(true)` when this attempt took it.
    fn wait_out_gap(&self, gap: Yield, stop: &Stop, attempter: &mut Attempter<'_>) -> Result<bool> {
        let until = attempter
            .request
            .deadline
            .map_or(gap.until, |d| d.min(gap.until));
        stop.sleep(until.saturating_duration_since(Instant::now()))?;
        match attempter.attempt() {
            Ok(Attempt::Acquired { .. }) => {
                self.runs.gap_outcome(true);
                Ok(true)
            }
            Ok(Attempt::HeldByOther(_)) => {
                self.runs.gap_outcome(false);
                attempter.outage.over();
                Ok(false)
            }
            Err(err) => attempter
                .outage
                .ride_out(&attempter.keys.name, err)
                .map(|()| false),
        }
    }
}

fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// A spin waiter's sleeps between attempts: with client tracking, none before the first (it
/// closes the race with a release before the tracking), then the tracked back-off; without,
/// Redisson's spin back-off.
enum SpinSleeps {
    Tracked { first: bool, backoff: Backoff },
    Spinning(SpinBackoff),
}

impl SpinSleeps {
    fn new(tracked: bool, salt: u64) -> Self {
        if tracked {
            SpinSleeps::Tracked {
                first: true,
                backoff: Backoff::tracked(salt),
            }
        } else {
            SpinSleeps::Spinning(SpinBackoff::new(salt))
        }
    }

    fn next(&mut self) -> Duration {
        match self {
            SpinSleeps::Tracked { first, backoff } => {
                if std::mem::take(first) {
                    Duration::ZERO
                } else {
                    backoff.next(1)
                }
            }
            SpinSleeps::Spinning(backoff) => backoff.next(),
        }
    }
}

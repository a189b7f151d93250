//! The paths an acquire takes (see [`Path`]): alone, for kinds whose order is Redis' business;
//! one attempt; or through the local line, where a thread waits for the turn behind the local
//! thread that has it, and with the turn contends in Redis ([`super::contend`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::attempter::Attempter;
use super::contend::Contention;
use super::plan::{AcquireFacts, AcquirePlan, Deployment, Path};
use super::{Engine, Held, NO_TTL_POLL, OUTAGE_RETRY};
use crate::engine::kind::{grants, hands_over, LockKind};
use crate::engine::line::{Entry, Join, Probed, Ticket, Wait, Yield};
use crate::engine::options::Request;
use crate::error::Result;
use crate::names::LockKeys;
use crate::stop::Stop;
use crate::store::Attempt;

/// How an acquire that got the lock got it.
#[derive(Clone, Copy)]
enum Got {
    AtOnce,
    AfterWaiting,
}

/// What having the turn means for the thread (see [`Entry`]).
enum Entered {
    /// It holds the lock: a release acquired in its name.
    Holding,
    /// It contends in Redis, after waiting out a yield to remote waiters if `Some`.
    Contend(Option<Yield>),
}

impl Engine {
    /// One acquire for thread `thread`, until the request's deadline or the stop.
    pub(super) fn acquire_once(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
        thread: u64,
        stop: &Stop,
    ) -> Result<Option<Held>> {
        let started = Instant::now();
        let plan = AcquirePlan::new(&AcquireFacts {
            takes_turns: kind.takes_turns().is_some(),
            spins: kind.spins(),
            grants: grants(kind).is_some(),
            one_attempt: request.one_attempt,
            fenced: request.fenced,
            // By any kind that counts in the same owner field: a spin lock taken by the
            // holder of the plain lock of its name is a re-entry, not a fresh hold.
            holding: self.holds.count(kind, keys, thread) > 0,
            // Only grants read the deployment: not asked on the other acquires' hot path.
            deployment: if grants(kind).is_some() && !request.fenced {
                self.deployment(&keys.name)
            } else {
                Deployment {
                    grants_possible: false,
                    waits_for_replicas: false,
                }
            },
        });
        let mut attempter = Attempter::new(self, kind, keys, request, thread, plan.fresh);
        let got = match plan.path {
            Path::Alone => self.acquire_alone(&plan, stop, &mut attempter),
            Path::OneAttempt => self.attempt_once(&plan, &mut attempter),
            Path::Line => self.acquire_in_line(&plan, stop, &mut attempter),
        }?;
        Ok(got.map(|got| {
            let waited = matches!(got, Got::AfterWaiting).then(|| started.elapsed());
            self.register_hold(&attempter, waited)
        }))
    }

    /// Every thread contends for itself.
    fn acquire_alone(
        &self,
        plan: &AcquirePlan,
        stop: &Stop,
        attempter: &mut Attempter<'_>,
    ) -> Result<Option<Got>> {
        let first = self.first_attempt(attempter);
        if let Err(err) = &first {
            // A timed-out attempt may have run, its reply lost: a fair lock's queue would keep
            // a waiter that is gone until its queue timeout, holding back everyone behind it
            // (Redisson 4.7 leaves the queue there too). A single attempt never queues; a
            // connection that failed sent nothing.
            if err.is_timeout() && !attempter.request.one_attempt {
                attempter.abandon();
            }
        }
        if first? {
            return Ok(Some(Got::AtOnce));
        }
        if attempter.request.one_attempt {
            return Ok(None);
        }
        let outcome = self.contend(plan, Contention::AfterAttempt, stop, attempter);
        if !matches!(outcome, Ok(true)) {
            attempter.abandon();
        }
        Ok(outcome?.then_some(Got::AfterWaiting))
    }

    /// A call's first attempt: whether it acquired. Where masters can be replaced, an outage
    /// (a failover under way) is ridden out by a call that has a wait, as by one already
    /// waiting (`crate::engine::outage`): `Ok(false)`, and the wait looks again.
    fn first_attempt(&self, attempter: &mut Attempter<'_>) -> Result<bool> {
        match attempter.attempt() {
            Ok(attempt) => Ok(attempt.is_acquired()),
            Err(err) if attempter.request.one_attempt => Err(err),
            Err(err) => {
                attempter.outage.ride_out_first(&attempter.keys.name, err)?;
                Ok(false)
            }
        }
    }

    /// One attempt and no queueing; while a local thread has the turn, the lock is held or
    /// about to be, and the answer is no without asking.
    fn attempt_once(
        &self,
        plan: &AcquirePlan,
        attempter: &mut Attempter<'_>,
    ) -> Result<Option<Got>> {
        let (keys, thread) = (attempter.keys, attempter.thread);
        if !plan.reentrant && !self.line.may_attempt(keys, thread) {
            return Ok(None);
        }
        if !attempter.attempt()?.is_acquired() {
            return Ok(None);
        }
        if !plan.reentrant {
            self.line.take_over(keys, thread);
        }
        Ok(Some(Got::AtOnce))
    }

    /// Through the local line (see [`crate::engine::line`]).
    fn acquire_in_line(
        &self,
        plan: &AcquirePlan,
        stop: &Stop,
        attempter: &mut Attempter<'_>,
    ) -> Result<Option<Got>> {
        let (keys, thread) = (attempter.keys, attempter.thread);
        let mut attempted = false;
        if plan.reentrant || !self.line.is_busy(keys) {
            // Uncontended here: one attempt, and no entry in the line unless it fails.
            if self.first_attempt(attempter)? {
                return Ok(Some(Got::AtOnce));
            }
            attempted = true;
        }
        let Some(entry) = self.take_turn(stop, attempter)? else {
            return Ok(None);
        };
        let start = match self.enter(entry, attempter)? {
            Entered::Holding => return Ok(Some(Got::AfterWaiting)),
            Entered::Contend(Some(yielded)) => Contention::Yield(yielded),
            Entered::Contend(None) if attempted => Contention::AfterAttempt,
            Entered::Contend(None) => Contention::Look,
        };
        let outcome = self.contend(plan, start, stop, attempter);
        if !matches!(outcome, Ok(true)) {
            // Given up (the wait passed, or an error): the next local thread may try.
            self.line.leave(keys, thread);
        }
        Ok(outcome?.then_some(Got::AfterWaiting))
    }

    /// Takes the turn, waiting behind the local thread that has it; `None` when the wait
    /// passed, the stop's error when it was stopped.
    fn take_turn(&self, stop: &Stop, attempter: &mut Attempter<'_>) -> Result<Option<Entry>> {
        let (keys, thread, request) = (attempter.keys, attempter.thread, attempter.request);
        let mut ticket = match self
            .line
            .join(keys, thread, request.lease_ms, request.fenced)
        {
            Join::Entered(entry) => return Ok(Some(entry)),
            Join::Queued(ticket) => ticket,
        };
        let _wakes = stop.wake_with(ticket.waker());
        loop {
            match self
                .line
                .wait(&mut ticket, request.deadline, &|| stop.is_stopped())
            {
                Wait::Entered(entry) => return Ok(Some(entry)),
                Wait::TimedOut => return Ok(None),
                Wait::Stopped => {
                    stop.check()?;
                    return Ok(None);
                }
                Wait::Probe => {
                    if let Some(entry) = self.probe(&mut ticket, attempter)? {
                        return Ok(Some(entry));
                    }
                }
            }
        }
    }

    /// First in line and out of patience: asks Redis itself, and reports to the line.
    fn probe(&self, ticket: &mut Ticket, attempter: &mut Attempter<'_>) -> Result<Option<Entry>> {
        let thread = attempter.thread;
        let probed = match attempter.attempt() {
            Ok(Attempt::Acquired { .. }) => Probed::Acquired,
            Ok(Attempt::HeldByOther(ttl)) => {
                attempter.outage.over();
                Probed::Held(ttl.map_or(NO_TTL_POLL, Duration::from_millis))
            }
            // A queued thread rides out an outage as the one with the turn does: it stays in
            // line and probes again soon.
            Err(err) => match attempter.outage.ride_out(&attempter.keys.name, err) {
                Ok(()) => Probed::Held(OUTAGE_RETRY),
                Err(err) => {
                    self.line.probed(ticket, thread, Probed::Failed);
                    return Err(err);
                }
            },
        };
        Ok(self.line.probed(ticket, thread, probed))
    }

    /// What the turn it was handed means for the thread.
    fn enter(&self, entry: Entry, attempter: &mut Attempter<'_>) -> Result<Entered> {
        match entry {
            Entry::Acquired { sent } => {
                if let Some(at) = sent {
                    attempter.given(at); // acquired by the releasing thread's request
                }
                Ok(Entered::Holding)
            }
            // A queued thread holds nothing of this lock but what the handoff gave it.
            Entry::Unconfirmed { sent } => {
                // Only a kind that hands over is handed the lock (and so left unsure of it).
                let count = hands_over(attempter.kind).map_or(Ok(0), |kind| {
                    kind.hold_count(&self.store, attempter.keys, &attempter.owner)
                });
                match count {
                    Ok(0) => Ok(Entered::Contend(None)),
                    Ok(_) => {
                        attempter.given(sent);
                        Ok(Entered::Holding)
                    }
                    Err(err) => {
                        self.line.leave(attempter.keys, attempter.thread);
                        Err(err)
                    }
                }
            }
            Entry::Turn { yielding } => Ok(Entered::Contend(yielding)),
        }
    }
}

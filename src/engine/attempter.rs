//! One acquire's attempts in Redis: the facts they carry (the owner or the acquisition's token,
//! the attempt id, the wait's registration for grants) and what they learned (when the hold's
//! lease counts from, its token, how long Redis has not answered).

use std::sync::Arc;

use super::Engine;
use crate::attempt_id::AttemptId;
use crate::clock::BootInstant;
use crate::engine::kind::{grants, AttemptArgs, LockKind};
use crate::engine::options::Request;
use crate::engine::outage::Outage;
use crate::error::Result;
use crate::names::LockKeys;
use crate::owner::owner_field;
use crate::store::Attempt;

/// The last attempt's facts: its id, when it was first sent (its lease counts from then) and
/// its token.
pub(super) struct Attempter<'a> {
    pub(super) engine: &'a Engine,
    pub(super) kind: &'static dyn LockKind,
    pub(super) keys: &'a Arc<LockKeys>,
    pub(super) thread: u64,
    /// The owner field, or the acquisition's token where the kind has one.
    pub(super) owner: String,
    /// Whether `owner` is the acquisition's token (see [`LockKind::fresh_token`]).
    own_token: bool,
    pub(super) request: &'a Request,
    id: AttemptId,
    pub(super) sent: BootInstant,
    pub(super) token: Option<u64>,
    /// Whether the owner holds nothing of the lock locally (see `AttemptArgs::fresh`).
    fresh: bool,
    /// This wait's number while it is registered for grants (see `super::grants`), and the
    /// control channel that tells a release its manager still listens.
    pub(super) waiting: Option<(u64, String)>,
    /// How long this waiter has found Redis not answering, and may go on waiting so.
    pub(super) outage: Outage,
}

impl<'a> Attempter<'a> {
    pub(super) fn new(
        engine: &'a Engine,
        kind: &'static dyn LockKind,
        keys: &'a Arc<LockKeys>,
        request: &'a Request,
        thread: u64,
        fresh: bool,
    ) -> Self {
        let (owner, own_token) = attempt_owner(engine, kind, keys, thread, fresh);
        Attempter {
            engine,
            kind,
            keys,
            thread,
            owner,
            own_token,
            request,
            id: AttemptId::new(),
            sent: BootInstant::now(),
            token: None,
            fresh,
            waiting: None,
            // Every send of one attempt carries its id: sent again, it takes nothing more.
            outage: Outage::of(engine).resending(),
        }
    }

    /// The token the hold keeps, where its kind has one per acquisition.
    pub(super) fn hold_token(&self) -> Option<&str> {
        self.own_token.then_some(self.owner.as_str())
    }

    fn args(&self) -> AttemptArgs<'_> {
        AttemptArgs {
            owner: &self.owner,
            lease_ms: self.request.lease_ms,
            fenced: self.request.fenced,
            wait_ms: self.request.wait_ms,
            attempt_id: self.id.current(),
            fresh: self.fresh,
        }
    }

    /// One attempt by the kind, registered for grants when the wait is.
    fn send_attempt(&self) -> Result<Attempt> {
        let (store, args) = (self.engine.store(), self.args());
        match (grants(self.kind), self.registration()) {
            (Some(grants), Some(waiting)) => {
                grants.attempt_registered(store, self.keys, &args, &waiting)
            }
            _ => self.kind.attempt(store, self.keys, &args),
        }
    }

    /// One attempt. One that no replica acknowledged is rolled back and fails.
    pub(super) fn attempt(&mut self) -> Result<Attempt> {
        if !self.id.start() {
            // A repeated attempt's hold, if the first send took it, counts from that send.
            self.sent = BootInstant::now();
        }
        let outcome = self.send_attempt();
        self.id.ended(&outcome);
        let outcome = match outcome {
            Err(err) if err.is_not_replicated() => {
                self.roll_back();
                return Err(err);
            }
            other => other?,
        };
        if let Attempt::Acquired { token } = outcome {
            self.token = token;
        }
        Ok(outcome)
    }

    /// The hold came without an attempt of this thread's (a handoff, a grant), by a request
    /// sent at `sent`: no token.
    pub(super) fn given(&mut self, sent: BootInstant) {
        self.sent = sent;
        self.token = None;
    }

    /// Takes back what an attempt that no replica acknowledged may have taken: one hold of
    /// this owner, if it got one. A release only ever removes the owner's own hold, so when
    /// the attempt found the lock held by another, this changes nothing.
    fn roll_back(&self) {
        let name = &self.keys.name;
        // A re-entry's attempt took no hold of its own where holds are counted here.
        match self.kind.release_counted(
            self.engine.store(),
            self.keys,
            &self.owner,
            self.request.lease_ms,
            self.fresh,
        ) {
            Ok(_) => {
                log::warn!("lock {name:?}: no replica acknowledged the acquire; rolled it back")
            }
            Err(err) => log::warn!(
                "lock {name:?}: no replica acknowledged the acquire, and rolling it back failed \
                 ({err}); it expires with its lease"
            ),
        }
    }

    /// Tells the kind that this owner stopped waiting (a failure is only logged: the kind's
    /// own timeouts clean up after a waiter that is gone).
    pub(super) fn abandon(&self) {
        if let Err(err) = self
            .kind
            .abandon(self.engine.store(), self.keys, &self.args())
        {
            log::warn!("lock {:?}: leaving the wait failed: {err}", self.keys.name);
        }
    }
}

/// What an acquire's attempts send as the owner, and whether it is a token of its own: the
/// owner field, or for a kind with a token per acquisition (`LockKind::fresh_token`) the
/// token of the hold the thread re-enters, else a fresh one. Every send of the acquire's
/// attempts carries it, so that a resend recognises what an earlier send took.
fn attempt_owner(
    engine: &Engine,
    kind: &'static dyn LockKind,
    keys: &Arc<LockKeys>,
    thread: u64,
    fresh: bool,
) -> (String, bool) {
    if !fresh {
        if let Some(held) = engine.holds.token(kind, keys, thread) {
            return (held.to_string(), true);
        }
    }
    let owner = owner_field(engine.client_id(), thread);
    match kind.fresh_token(&owner) {
        Some(token) => (token, true),
        None => (owner, false),
    }
}

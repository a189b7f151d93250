//! What one acquire and one release will do, decided in one place from the lock's kind, the
//! request, the thread's holds and the deployment: the path an acquire takes, how its waiter
//! learns of releases, whether it registers for grants, and whether a release acquires for a
//! local successor in its own script call and whose hearing of the unlock it disregards.
//!
//! Pure: the engine gathers the facts and does the I/O. The tests below go through every
//! deployment (docs/design/engine.md has the same table in prose).

use crate::engine::holds::HoldsLeft;
use crate::engine::kind::Listeners;

/// What the deployment allows, as the store knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deployment {
    /// A release can count who may be granted the lock (`PUBSUB NUMSUB`, `SHARDNUMSUB`):
    /// everywhere but on a cluster without sharded pub/sub, where a node does not see the
    /// subscribers of other nodes.
    pub(crate) grants_possible: bool,
    /// Acquires on this lock wait for a replica's acknowledgement (replica sync, and the
    /// master has or had replicas).
    pub(crate) waits_for_replicas: bool,
}

/// The facts an acquire is planned from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireFacts {
    /// The kind takes turns in the local line (`TakesTurns`).
    pub(crate) takes_turns: bool,
    /// The kind's releases are silent (`LockKind::spins`).
    pub(crate) spins: bool,
    /// The kind's releases may grant the lock to a registered waiter (`Grants`).
    pub(crate) grants: bool,
    /// Exactly one attempt, no waiting.
    pub(crate) one_attempt: bool,
    /// A fenced acquire: only the thread's own attempt returns its token.
    pub(crate) fenced: bool,
    /// The thread already holds the lock through this manager, by this kind or another that
    /// counts in the same owner field (`Family`).
    pub(crate) holding: bool,
    pub(crate) deployment: Deployment,
}

/// The way an acquire goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// Every thread contends for itself: the kind's order is Redis' business (a fair lock's
    /// queue) or its holds are shared (read locks).
    Alone,
    /// One attempt and no queueing; while another local thread has the turn, the answer is no
    /// without asking.
    OneAttempt,
    /// Through the local line: only the thread with the turn contends in Redis.
    Line,
}

/// How a waiter learns that the lock may be free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listen {
    /// An unlock message on the lock's channel (and a back-off look).
    Subscribe,
    /// Nothing announces a release (Redisson's spin lock): it looks again after a back-off.
    Spin,
}

/// What one acquire does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquirePlan {
    pub(crate) path: Path,
    /// The thread holds the lock already, so no local thread can be ahead of it.
    pub(crate) reentrant: bool,
    /// The owner holds nothing of the lock locally (see `AttemptArgs::fresh`): whatever the
    /// line, a kind without one (a spin lock) re-enters by counting on.
    pub(crate) fresh: bool,
    pub(crate) listen: Listen,
    /// Its waiter registers, so that a release by another client may grant it the lock
    /// (docs/design/engine.md, "Grants").
    pub(crate) registers_for_grants: bool,
}

impl AcquirePlan {
    pub(crate) fn new(facts: &AcquireFacts) -> Self {
        let path = match (facts.takes_turns, facts.one_attempt) {
            (false, _) => Path::Alone,
            (true, true) => Path::OneAttempt,
            (true, false) => Path::Line,
        };
        AcquirePlan {
            path,
            reentrant: facts.takes_turns && facts.holding,
            fresh: !facts.holding,
            listen: if facts.spins {
                Listen::Spin
            } else {
                Listen::Subscribe
            },
            // A fenced acquire needs its own token, and with replica sync only the acquiring
            // thread's attempt waits for the replicas: no grants for either. A re-entry (its
            // Redis hold lost, it waits) neither: a grant, or a registered attempt, writes the
            // owner's only hold, and the re-entry counts one more by its attempt marker.
            registers_for_grants: facts.grants
                && !facts.holding
                && !facts.fenced
                && facts.deployment.grants_possible
                && !facts.deployment.waits_for_replicas,
        }
    }
}

/// The facts a release is planned from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseFacts {
    /// The kind's release script passes the lock on (`HandsOver`): to a local successor, to
    /// remote waiters who heard (a yield), or by a grant. A spin lock's cannot (it takes turns,
    /// but its script is Redisson's, silent, and acquires for nobody).
    pub(crate) hands_over: bool,
    /// The released hold was renewed by the watchdog (no fixed lease).
    pub(crate) renewed: bool,
    /// The released hold's lease.
    pub(crate) lease_ms: u64,
    /// The lease the watchdog gives the holds it renews.
    pub(crate) watchdog_ms: u64,
    /// What the thread still holds of the lock after this release.
    pub(crate) left: HoldsLeft,
    /// The local successor the line took off for this release, if any: whether the releasing
    /// thread may acquire in its name (`Successor::may_acquire`).
    pub(crate) successor_may_acquire: Option<bool>,
    pub(crate) waits_for_replicas: bool,
    /// This manager's listener is subscribed to the lock's channel.
    pub(crate) listening: bool,
    /// Releases hand over locally whoever else hears (`Line::yields_suspended`).
    pub(crate) yields_suspended: bool,
    /// How many messages this manager's listener has heard on the channel so far.
    pub(crate) heard_so_far: u64,
}

/// What one release does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReleasePlan {
    /// The lease of the holds that remain.
    pub(crate) lease_ms: u64,
    /// It is the thread's last hold: the lock is freed (and announced, or handed over).
    pub(crate) last: bool,
    /// The script acquires for the local successor, unless others heard the unlock.
    pub(crate) acquire_for_successor: bool,
    pub(crate) listeners: Listeners,
    /// What this manager's listener will have heard on the channel once this release's own
    /// unlock message is in, if nobody else releases the lock meanwhile: a yield's
    /// `Yield` compares against it. Only a release that may yield (a last hold, with the
    /// line) needs it.
    pub(crate) messages_expected: u64,
}

/// Plans a release (see [`ReleasePlan`]).
pub(crate) fn plan_release(facts: &ReleaseFacts) -> ReleasePlan {
    let last = facts.left.total == 0;
    // Holds that remain keep the lease the watchdog gives them, if it renews them.
    let lease_ms = if facts.renewed || facts.left.renewed > 0 {
        facts.watchdog_ms
    } else {
        facts.lease_ms
    };
    // Some successors acquire themselves: a fenced one wants its own token, and with replica
    // sync an acquire must be acknowledged by a replica or rolled back, which only the
    // acquiring thread's own attempt does (a release's WAIT failing cannot fail it).
    // A spin lock's release is Redisson's script, which cannot acquire for anyone.
    let acquire_for_successor =
        facts.successor_may_acquire == Some(true) && !facts.waits_for_replicas && facts.hands_over;
    // Only a last release sends an unlock message for the listener to hear.
    let own = last && facts.listening;
    // Who may hear the unlock without the lock being left to them: this manager's own
    // listener, or everyone while yields keep finding the lock free (no real waiter).
    let ignored = if facts.hands_over && facts.yields_suspended {
        u64::from(u32::MAX)
    } else {
        u64::from(facts.hands_over && own)
    };
    let messages_expected = if last && facts.hands_over {
        facts.heard_so_far + u64::from(ignored == 1)
    } else {
        0
    };
    ReleasePlan {
        lease_ms,
        last,
        acquire_for_successor,
        listeners: Listeners { ignored, own },
        messages_expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINGLE: Deployment = Deployment {
        grants_possible: true,
        waits_for_replicas: false,
    };
    /// A Sentinel master (or a single server with replicas) with replica sync on.
    const REPLICATED: Deployment = Deployment {
        grants_possible: true,
        waits_for_replicas: true,
    };
    /// A cluster with classic pub/sub: a node cannot count the waiters of other nodes.
    const CLUSTER: Deployment = Deployment {
        grants_possible: false,
        waits_for_replicas: false,
    };
    /// A cluster with sharded pub/sub and replica sync.
    const SHARDED_REPLICATED: Deployment = Deployment {
        grants_possible: true,
        waits_for_replicas: true,
    };

    /// A plain lock's blocking acquire by a thread that holds nothing.
    fn lock(deployment: Deployment) -> AcquireFacts {
        AcquireFacts {
            takes_turns: true,
            spins: false,
            grants: true,
            one_attempt: false,
            fenced: false,
            holding: false,
            deployment,
        }
    }

    #[test]
    fn grants_only_where_a_release_can_count_waiters_and_nothing_waits_for_replicas() {
        let registers = |facts: AcquireFacts| AcquirePlan::new(&facts).registers_for_grants;
        assert!(registers(lock(SINGLE)));
        assert!(!registers(lock(REPLICATED)));
        assert!(!registers(lock(CLUSTER)));
        assert!(!registers(lock(SHARDED_REPLICATED)));
        let sharded = Deployment {
            waits_for_replicas: false,
            ..SHARDED_REPLICATED
        };
        assert!(registers(lock(sharded)));
        let fenced = AcquireFacts {
            fenced: true,
            ..lock(SINGLE)
        };
        assert!(!registers(fenced), "a fenced acquire wants its own token");
        let reentry = AcquireFacts {
            holding: true,
            ..lock(SINGLE)
        };
        assert!(
            !registers(reentry),
            "a re-entry counts on, a grant would not"
        );
        let fair = AcquireFacts {
            takes_turns: false,
            grants: false,
            ..lock(SINGLE)
        };
        assert!(!registers(fair), "a kind without grants");
    }

    #[test]
    fn the_path_follows_the_kind_and_the_request() {
        let plan = AcquirePlan::new(&lock(SINGLE));
        assert_eq!(
            (plan.path, plan.reentrant, plan.fresh, plan.listen),
            (Path::Line, false, true, Listen::Subscribe)
        );
        let again = AcquirePlan::new(&AcquireFacts {
            holding: true,
            ..lock(SINGLE)
        });
        assert_eq!((again.reentrant, again.fresh), (true, false));
        let try_lock = AcquirePlan::new(&AcquireFacts {
            one_attempt: true,
            ..lock(CLUSTER)
        });
        assert_eq!(try_lock.path, Path::OneAttempt);
        // A read lock or a fair lock: shared holds or Redis' own queue, no line.
        let shared = AcquirePlan::new(&AcquireFacts {
            takes_turns: false,
            holding: true,
            ..lock(SINGLE)
        });
        assert_eq!(
            (shared.path, shared.reentrant, shared.fresh),
            (Path::Alone, false, false)
        );
        let spin = AcquirePlan::new(&AcquireFacts {
            spins: true,
            grants: false,
            ..lock(SINGLE)
        });
        assert_eq!(
            (spin.listen, spin.registers_for_grants),
            (Listen::Spin, false)
        );
    }

    /// The last release of a renewed hold of a plain lock, with a local successor that may be
    /// acquired for, while this manager's listener is subscribed.
    fn last_release(waits_for_replicas: bool) -> ReleaseFacts {
        ReleaseFacts {
            hands_over: true,
            renewed: true,
            lease_ms: 30_000,
            watchdog_ms: 30_000,
            left: HoldsLeft::default(),
            successor_may_acquire: Some(true),
            waits_for_replicas,
            listening: true,
            yields_suspended: false,
            heard_so_far: 7,
        }
    }

    #[test]
    fn a_last_release_acquires_for_the_local_successor_unless_replicas_must_acknowledge() {
        // Single server, a cluster, a Sentinel master without replica sync.
        let plan = plan_release(&last_release(false));
        assert!(plan.last && plan.acquire_for_successor);
        // Only this manager's own listener is disregarded: a Redisson client or another
        // process that hears the unlock makes the script leave the lock to them.
        assert_eq!(
            plan.listeners,
            Listeners {
                ignored: 1,
                own: true
            }
        );
        assert_eq!(
            plan.messages_expected, 8,
            "its own unlock message comes too"
        );
        // Replica sync where there are replicas: the successor acquires itself.
        let plan = plan_release(&last_release(true));
        assert!(!plan.acquire_for_successor);
        assert_eq!(plan.listeners.ignored, 1);
        // A fenced successor, or one asking Redis itself right now.
        let plan = plan_release(&ReleaseFacts {
            successor_may_acquire: Some(false),
            ..last_release(false)
        });
        assert!(!plan.acquire_for_successor);
        let plan = plan_release(&ReleaseFacts {
            successor_may_acquire: None,
            ..last_release(false)
        });
        assert!(!plan.acquire_for_successor, "nobody to acquire for");
        // A spin lock: the successor gets only the turn.
        let plan = plan_release(&ReleaseFacts {
            hands_over: false,
            ..last_release(false)
        });
        assert!(!plan.acquire_for_successor, "Redisson's spin release");
    }

    #[test]
    fn without_its_own_listener_a_release_disregards_nobody() {
        let plan = plan_release(&ReleaseFacts {
            listening: false,
            ..last_release(false)
        });
        assert_eq!(
            plan.listeners,
            Listeners {
                ignored: 0,
                own: false
            }
        );
        assert_eq!(plan.messages_expected, 7);
    }

    #[test]
    fn while_yields_are_suspended_every_listener_is_disregarded() {
        let plan = plan_release(&ReleaseFacts {
            yields_suspended: true,
            ..last_release(false)
        });
        assert_eq!(plan.listeners.ignored, u64::from(u32::MAX));
        assert_eq!(plan.messages_expected, 7);
    }

    #[test]
    fn a_release_that_leaves_holds_keeps_their_lease_and_announces_nothing() {
        let renewed_left = plan_release(&ReleaseFacts {
            renewed: false,
            lease_ms: 5_000,
            left: HoldsLeft {
                total: 2,
                renewed: 1,
            },
            ..last_release(false)
        });
        assert!(!renewed_left.last);
        assert_eq!(renewed_left.lease_ms, 30_000, "the watchdog renews one");
        assert!(!renewed_left.listeners.own);
        assert_eq!(renewed_left.messages_expected, 0);
        let fixed_left = plan_release(&ReleaseFacts {
            renewed: false,
            lease_ms: 5_000,
            left: HoldsLeft {
                total: 1,
                renewed: 0,
            },
            ..last_release(false)
        });
        assert_eq!(fixed_left.lease_ms, 5_000);
    }

    #[test]
    fn a_kind_without_the_line_disregards_nobody_and_never_yields() {
        // A fair lock, a read lock: their own listener is no reason to keep the lock.
        let plan = plan_release(&ReleaseFacts {
            hands_over: false,
            successor_may_acquire: None,
            yields_suspended: true,
            ..last_release(false)
        });
        assert_eq!(
            plan.listeners,
            Listeners {
                ignored: 0,
                own: true
            }
        );
        assert_eq!(plan.messages_expected, 0);
        assert!(!plan.acquire_for_successor);
    }
}

//! Whether a command is sent again, and what a failure is told as: the resend policy
//! (docs/design/deployments.md, "Never twice blindly") and the classification of errors it rests on.

use std::time::{Duration, Instant};

use redis::RedisError;

use super::LockStore;
use crate::error::{server_code, Error};

/// How one attempt at a command failed, before it is told to the caller.
#[derive(Debug)]
pub(super) enum Failed {
    /// Redis (or the connection) answered with an error.
    Redis(RedisError),
    /// Something before or after the command: no connection, no replica acknowledgement.
    Other(Error),
}

impl Failed {
    /// A MOVED or ASK redirection: the node's address, and whether it is ASK.
    pub(super) fn redirection(&self) -> Option<(String, bool)> {
        let Failed::Redis(err) = self else {
            return None;
        };
        let ask = match err.code() {
            Some("MOVED") => false,
            Some("ASK") => true,
            _ => return None,
        };
        err.redirect_node().map(|(addr, _)| (addr.to_owned(), ask))
    }

    /// Whether a script was refused for touching a key its node does not serve (see
    /// [`is_not_local`]).
    pub(super) fn is_not_local(&self) -> bool {
        matches!(self, Failed::Redis(err) if is_not_local(err))
    }

    /// Whether this means the master moved (a failover, a resharding): nothing ran, and the
    /// command may go to the master found again. Only where masters can move.
    pub(super) fn means_topology_changed(&self, store: &LockStore) -> bool {
        if !store.topology.capabilities().masters_move {
            return false;
        }
        match self {
            Failed::Redis(err) => {
                matches!(
                    server_code(err).as_deref(),
                    Some("MOVED" | "READONLY" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN")
                ) || err.is_connection_refusal()
            }
            Failed::Other(Error::Connect { source }) => source.redis().is_connection_refusal(),
            Failed::Other(_) => false,
        }
    }

    pub(super) fn into_error(self, store: &LockStore, operation: Op, name: &str) -> Error {
        match self {
            Failed::Redis(err) => store.classify(operation, name, err),
            Failed::Other(err) => err,
        }
    }
}

impl LockStore {
    /// The error for a failed command; a timeout says what timed out, after how long.
    pub(super) fn classify(&self, op: Op, name: &str, err: RedisError) -> Error {
        if err.is_timeout() {
            Error::Timeout {
                operation: op.name(),
                after: Duration::ZERO,
            }
        } else {
            Error::from_command(op.name(), name, err)
        }
    }
}

impl Error {
    /// A timeout error reports how long this store call took (routing, the command, any retry
    /// on a new connection), not the caller's wait before it.
    pub(super) fn timed(self, started: Instant) -> Self {
        match self {
            Error::Timeout { operation, .. } => Error::Timeout {
                operation,
                after: round_ms(started.elapsed()),
            },
            other => other,
        }
    }
}

/// Every operation the store runs, each with its resend policy ([`Op::policy`]): a new
/// operation cannot be sent without one being chosen for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SCRIPT LOAD` of the lock scripts as a manager starts.
    LoadScripts,
    /// An acquire attempt of any lock kind (it carries its attempt id).
    Acquire,
    /// A release of any lock kind (it carries its latch).
    Release,
    /// A registered waiter leaves the lock's waiters.
    StopWaiting,
    /// A fair-lock waiter leaves the queue.
    LeaveQueue,
    /// A lock deleted whoever holds it.
    ForceUnlock,
    /// `Lock::is_locked`.
    IsLocked,
    /// `Lock::hold_count`.
    HoldCount,
    /// `Lock::is_held_by_current_thread`.
    IsHeldBy,
    /// `Lock::remaining_ttl`.
    RemainingTtl,
    /// The fencing token counter read.
    CurrentToken,
    /// A wake-up published on a listener's channel, or the check of the channel rights.
    Publish,
    /// The watchdog's renewals (sent by their own sweeps, see `renewal`).
    Renew,
    /// `Semaphore::try_set_permits`.
    SemaphoreTrySetPermits,
    /// A semaphore acquire attempt (it carries its attempt id).
    SemaphoreAcquire,
    /// `Semaphore::release`.
    SemaphoreRelease,
    /// `Semaphore::add_permits`.
    SemaphoreAddPermits,
    /// `Semaphore::drain_permits`.
    SemaphoreDrainPermits,
    /// `Semaphore::available_permits`.
    SemaphoreAvailablePermits,
    /// A permit-expirable semaphore's acquire attempt.
    PermitSemaphoreAcquire,
    /// A permit-expirable semaphore's release of one permit.
    PermitSemaphoreRelease,
    /// A permit-expirable semaphore's permit lease changed.
    PermitSemaphoreUpdateLease,
    /// A permit-expirable semaphore's leases read.
    PermitSemaphoreLeases,
    /// A permit-expirable semaphore's count set.
    PermitSemaphoreSetPermits,
    /// A permit-expirable semaphore's permits added.
    PermitSemaphoreAddPermits,
    /// A permit-expirable semaphore's counts (expired permits taken back first).
    PermitSemaphoreCounts,
    /// `CountDownLatch::try_set_count`.
    LatchTrySetCount,
    /// `CountDownLatch::count_down`.
    LatchCountDown,
    /// `CountDownLatch::count`.
    LatchCount,
}

/// When an operation is sent again (docs/design/deployments.md, "Never twice blindly").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Sent again on a new connection when the pooled one it went out on turns out dead:
    /// not those that would count twice, whose callers are told that the outcome is
    /// unknown instead.
    pub(crate) after_dead_connection: bool,
    /// Sent again when it has almost surely run (the wait for its reply was interrupted):
    /// only where a second run changes nothing (reads, publishing a wake-up, leaving a queue)
    /// or answers as the first did (an acquire, by its attempt id; a release, by its latch).
    /// Not a force unlock (it would delete the lock of whoever took it in between) nor the
    /// setting of a count, whose repeat answers "already set" or sets it again after others
    /// changed it.
    pub(crate) after_interrupt: bool,
    /// Waits for the replicas' acknowledgement when replica sync is on (docs/design/deployments.md,
    /// "Replica acknowledgement"): acquires and releases of every lock kind.
    pub(crate) replicated: bool,
}

impl Policy {
    /// Sent again where it did not run, never where it may have run: counts twice.
    const ONCE: Policy = Policy {
        after_dead_connection: false,
        after_interrupt: false,
        replicated: false,
    };
    /// Sent again after a dead pooled connection (where it most likely did not run), not
    /// after an interrupted wait (where it almost surely ran).
    const MOST_LIKELY_ONCE: Policy = Policy {
        after_dead_connection: true,
        ..Policy::ONCE
    };
    /// Sent again whenever its reply is missing: a second run changes nothing.
    const IDEMPOTENT: Policy = Policy {
        after_dead_connection: true,
        after_interrupt: true,
        replicated: false,
    };
    /// An idempotent write of lock state, waiting for replicas with replica sync on.
    const REPLICATED: Policy = Policy {
        replicated: true,
        ..Policy::IDEMPOTENT
    };
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Op {
    /// What errors and logs call it.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Op::LoadScripts => "loading the lock scripts",
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::StopWaiting => "stop waiting",
            Op::LeaveQueue => "leave the queue",
            Op::ForceUnlock => "force unlock",
            Op::IsLocked => "is_locked",
            Op::HoldCount => "hold_count",
            Op::IsHeldBy => "is_held_by_current_thread",
            Op::RemainingTtl => "remaining_ttl",
            Op::CurrentToken => "current_token",
            Op::Publish => "publish",
            Op::Renew => "renew",
            Op::SemaphoreTrySetPermits => "semaphore try_set_permits",
            Op::SemaphoreAcquire => "semaphore acquire",
            Op::SemaphoreRelease => "semaphore release",
            Op::SemaphoreAddPermits => "semaphore add_permits",
            Op::SemaphoreDrainPermits => "semaphore drain_permits",
            Op::SemaphoreAvailablePermits => "semaphore available_permits",
            Op::PermitSemaphoreAcquire => "permit-expirable semaphore acquire",
            Op::PermitSemaphoreRelease => "permit-expirable semaphore release",
            Op::PermitSemaphoreUpdateLease => "permit-expirable semaphore update_lease_time",
            Op::PermitSemaphoreLeases => "permit-expirable semaphore leases",
            Op::PermitSemaphoreSetPermits => "permit-expirable semaphore set_permits",
            Op::PermitSemaphoreAddPermits => "permit-expirable semaphore add_permits",
            Op::PermitSemaphoreCounts => "permit-expirable semaphore counts",
            Op::LatchTrySetCount => "count-down latch try_set_count",
            Op::LatchCountDown => "count-down latch count_down",
            Op::LatchCount => "count-down latch count",
        }
    }

    /// When it is sent again (see [`Policy`]).
    pub(crate) const fn policy(self) -> Policy {
        match self {
            Op::Acquire | Op::Release => Policy::REPLICATED,
            Op::LoadScripts
            | Op::StopWaiting
            | Op::LeaveQueue
            | Op::IsLocked
            | Op::HoldCount
            | Op::IsHeldBy
            | Op::RemainingTtl
            | Op::Publish
            | Op::Renew
            | Op::SemaphoreAcquire
            | Op::SemaphoreAvailablePermits
            | Op::CurrentToken
            | Op::PermitSemaphoreLeases
            | Op::LatchCount => Policy::IDEMPOTENT,
            // Run twice, these count twice (permits added, a count down) or answer wrongly (a
            // permit released, then "not acquired"): their callers are told that the outcome
            // is unknown instead, as their docs say.
            Op::SemaphoreRelease
            | Op::SemaphoreAddPermits
            | Op::PermitSemaphoreRelease
            | Op::PermitSemaphoreAddPermits
            | Op::LatchCountDown => Policy::ONCE,
            Op::ForceUnlock
            | Op::SemaphoreTrySetPermits
            | Op::SemaphoreDrainPermits
            | Op::PermitSemaphoreAcquire
            | Op::PermitSemaphoreUpdateLease
            | Op::PermitSemaphoreSetPermits
            | Op::PermitSemaphoreCounts
            | Op::LatchTrySetCount => Policy::MOST_LIKELY_ONCE,
        }
    }
}

/// An error reply saying that the server does not know the command.
pub(super) fn is_unknown_command(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.to_string().contains("unknown command")
}

/// "Script attempted to access a non local key in a cluster node script": a script sent to a
/// node that does not serve its keys' slot, which a managed cluster behind one endpoint
/// (ElastiCache Serverless) answers under load (Redisson #5586, #6718). Told by the words:
/// the code is a plain `ERR`.
pub(crate) fn is_not_local(err: &RedisError) -> bool {
    err.to_string().contains("non local key")
}

/// `d` to whole milliseconds, for messages.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// The reply may be lost although the command ran: a timeout or a broken connection.
pub(crate) fn is_lost_reply(err: &Error) -> bool {
    err.is_timeout() || err.is_connection_error()
}

/// What [`send_again_if_lost`] got: the last send's reply, and whether the first send's was
/// lost (then that send may have run, before or even after the second).
pub(crate) struct Resent<T> {
    /// The reply of the last send.
    pub(crate) reply: Result<T, Error>,
    /// Whether the command was sent a second time, its first reply lost.
    pub(crate) again: bool,
}

/// Runs `send`, and once more when its reply was lost ([`is_lost_reply`]): for a release
/// whose second run answers as the first did (a latch) or changes nothing more (a
/// token-checked delete or renewal).
pub(crate) fn send_again_if_lost<T>(name: &str, send: impl Fn() -> Result<T, Error>) -> Resent<T> {
    match send() {
        Err(err) if is_lost_reply(&err) => {
            log::debug!("release of {name:?}: {err}; sending it again");
            Resent {
                reply: send(),
                again: true,
            }
        }
        reply => Resent {
            reply,
            again: false,
        },
    }
}

/// The connection is gone: nothing was read from it, so the server never answered.
pub(super) fn is_dead_connection(err: &RedisError) -> bool {
    err.is_connection_dropped() || err.is_connection_refusal()
}

/// A node that does not answer at all: refused, unreachable, or silent.
pub(super) fn is_unreachable(err: &Error) -> bool {
    err.is_connection_error() || err.is_timeout()
}

/// The connection's state is unknown (I/O failed or a reply may still arrive): never reuse it.
pub(super) fn is_broken(err: &RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || is_dead_connection(err)
}

#[cfg(test)]
mod tests {
    use super::Op;

    /// Every operation's policy, written out: (operation, sent again after a dead pooled
    /// connection, after an interrupted wait, waits for replicas).
    const POLICIES: [(Op, bool, bool, bool); 29] = [
        (Op::LoadScripts, true, true, false),
        (Op::Acquire, true, true, true),
        (Op::Release, true, true, true),
        (Op::StopWaiting, true, true, false),
        (Op::LeaveQueue, true, true, false),
        (Op::ForceUnlock, true, false, false),
        (Op::IsLocked, true, true, false),
        (Op::HoldCount, true, true, false),
        (Op::IsHeldBy, true, true, false),
        (Op::RemainingTtl, true, true, false),
        (Op::CurrentToken, true, true, false),
        (Op::Publish, true, true, false),
        (Op::Renew, true, true, false),
        (Op::SemaphoreTrySetPermits, true, false, false),
        (Op::SemaphoreAcquire, true, true, false),
        (Op::SemaphoreRelease, false, false, false),
        (Op::SemaphoreAddPermits, false, false, false),
        (Op::SemaphoreDrainPermits, true, false, false),
        (Op::SemaphoreAvailablePermits, true, true, false),
        (Op::PermitSemaphoreAcquire, true, false, false),
        (Op::PermitSemaphoreRelease, false, false, false),
        (Op::PermitSemaphoreUpdateLease, true, false, false),
        (Op::PermitSemaphoreLeases, true, true, false),
        (Op::PermitSemaphoreSetPermits, true, false, false),
        (Op::PermitSemaphoreAddPermits, false, false, false),
        (Op::PermitSemaphoreCounts, true, false, false),
        (Op::LatchTrySetCount, true, false, false),
        (Op::LatchCountDown, false, false, false),
        (Op::LatchCount, true, true, false),
    ];

    /// Fails to compile when an operation is added without a row in [`POLICIES`].
    fn row(op: Op) -> usize {
        match op {
            Op::LoadScripts => 0,
            Op::Acquire => 1,
            Op::Release => 2,
            Op::StopWaiting => 3,
            Op::LeaveQueue => 4,
            Op::ForceUnlock => 5,
            Op::IsLocked => 6,
            Op::HoldCount => 7,
            Op::IsHeldBy => 8,
            Op::RemainingTtl => 9,
            Op::CurrentToken => 10,
            Op::Publish => 11,
            Op::Renew => 12,
            Op::SemaphoreTrySetPermits => 13,
            Op::SemaphoreAcquire => 14,
            Op::SemaphoreRelease => 15,
            Op::SemaphoreAddPermits => 16,
            Op::SemaphoreDrainPermits => 17,
            Op::SemaphoreAvailablePermits => 18,
            Op::PermitSemaphoreAcquire => 19,
            Op::PermitSemaphoreRelease => 20,
            Op::PermitSemaphoreUpdateLease => 21,
            Op::PermitSemaphoreLeases => 22,
            Op::PermitSemaphoreSetPermits => 23,
            Op::PermitSemaphoreAddPermits => 24,
            Op::PermitSemaphoreCounts => 25,
            Op::LatchTrySetCount => 26,
            Op::LatchCountDown => 27,
            Op::LatchCount => 28,
        }
    }

    #[test]
    fn each_operation_has_its_resend_policy() {
        for (i, (op, after_dead_connection, after_interrupt, replicated)) in
            POLICIES.into_iter().enumerate()
        {
            assert_eq!(row(op), i, "{op:?} is in its own row");
            let policy = op.policy();
            assert_eq!(
                (
                    policy.after_dead_connection,
                    policy.after_interrupt,
                    policy.replicated
                ),
                (after_dead_connection, after_interrupt, replicated),
                "{op:?}"
            );
        }
    }

    #[test]
    fn what_is_sent_again_after_an_interrupt_is_sent_again_after_a_dead_connection() {
        for (op, ..) in POLICIES {
            let policy = op.policy();
            assert!(
                !policy.after_interrupt || policy.after_dead_connection,
                "{op:?}"
            );
            assert!(!policy.replicated || policy.after_interrupt, "{op:?}");
        }
    }

    #[test]
    fn operations_have_distinct_names() {
        let mut names: Vec<&str> = POLICIES.iter().map(|(op, ..)| op.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), POLICIES.len());
    }
}

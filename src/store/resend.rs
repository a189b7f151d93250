//! Whether a command is sent again, and what a failure is told as: the resend policy
//! (docs/DESIGN.md, "Never twice blindly") and the classification of errors it rests on.

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
        if !store.topology.follows_failovers() {
            return false;
        }
        match self {
            Failed::Redis(err) => {
                matches!(
                    server_code(err).as_deref(),
                    Some("MOVED" | "READONLY" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN")
                ) || err.is_connection_refusal()
            }
            Failed::Other(Error::Connect { source }) => source.is_connection_refusal(),
            Failed::Other(_) => false,
        }
    }

    pub(super) fn into_error(
        self,
        store: &LockStore,
        operation: &'static str,
        name: &str,
    ) -> Error {
        match self {
            Failed::Redis(err) => store.classify(operation, name, err),
            Failed::Other(err) => err,
        }
    }
}

impl LockStore {
    /// The error for a failed command; a timeout says what timed out, after how long.
    pub(super) fn classify(&self, operation: &'static str, name: &str, err: RedisError) -> Error {
        if err.is_timeout() {
            Error::Timeout {
                operation,
                after: Duration::ZERO,
            }
        } else {
            Error::from_command(operation, name, err)
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

/// Whether a command may be sent again on a new connection when the pooled one it went out
/// on turns out dead (docs/DESIGN.md, "Never twice blindly"): not those that would count
/// twice, whose callers are told that the outcome is unknown instead.
pub(super) fn may_repeat(operation: &str) -> bool {
    !matches!(
        operation,
        "semaphore release" | "count-down latch count_down"
    )
}

/// Whether a command that has almost surely run may be sent again: one whose second run
/// changes nothing (reads, publishing a wake-up, leaving a queue) or answers as the first did
/// (an acquire, by its attempt id; a release, by its latch). Not a force unlock (it would
/// delete the lock of whoever took it in between) nor the setting of a count, whose repeat
/// answers "already set" or sets it again after others changed it.
pub(super) fn is_idempotent(operation: &str) -> bool {
    matches!(
        operation,
        "acquire"
            | "release"
            | "stop waiting"
            | "semaphore acquire"
            | "leave the queue"
            | "publish"
            | "loading the lock scripts"
            | "is_locked"
            | "hold_count"
            | "is_held_by_current_thread"
            | "remaining_ttl"
            | "semaphore available_permits"
            | "count-down latch count"
    )
}

/// Acquires and releases of locks wait for replicas when replica sync is on (docs/DESIGN.md,
/// "Replica acknowledgement"): every lock kind's scripts go through here under these names.
pub(super) fn is_replicated_operation(operation: &str) -> bool {
    matches!(operation, "acquire" | "release")
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
pub(super) fn is_lost_reply(err: &Error) -> bool {
    err.is_timeout() || err.is_connection_error()
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

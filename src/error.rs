//! The crate's error type. What Redis or the connection reported is kept in a
//! [`RedisFailure`], in `failure.rs`, with what the crate reads from a redis-rs error.

use std::fmt;
use std::time::Duration;

mod failure;

pub(crate) use failure::{is_interrupted, server_code};
pub use failure::{FailureKind, RedisFailure};

/// What can go wrong when talking to the lock service.
///
/// Every variant says what failed and why; the [`Display`](fmt::Display) text is meant to be
/// shown to a person as it is. Match on the predicates ([`is_not_held`](Error::is_not_held),
/// [`is_timeout`](Error::is_timeout), ...) rather than on variants where you can: new variants
/// may be added (the enum is `#[non_exhaustive]`).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A name (of a lock, semaphore or count-down latch) was refused before anything was sent:
    /// empty, too long, or one a cluster cannot serve.
    InvalidName {
        /// Why the name was refused.
        reason: String,
    },
    /// A duration, size or other argument was out of range (zero lease, lease beyond Redis'
    /// millisecond range, pool size of zero, ...). Nothing was sent to Redis.
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The connection URL could not be parsed, or the server refused what it names (a
    /// database number it does not have). The URL is not repeated, since it may contain a
    /// password.
    InvalidUrl {
        /// The parser's complaint, or the server's reply
        /// ([`kind`](RedisFailure::kind) [`Server`](FailureKind::Server)).
        source: RedisFailure,
    },
    /// No connection to Redis could be made (refused, unreachable, wrong password, ...).
    Connect {
        /// The last connection error; its [`kind`](RedisFailure::kind) says which.
        source: RedisFailure,
    },
    /// Redis answered a command with an error, or the connection broke while it ran.
    Redis {
        /// What the crate was doing ("acquire", "release", "renew", ...).
        operation: &'static str,
        /// The error from Redis (its [`code`](RedisFailure::code)) or from the connection.
        source: RedisFailure,
    },
    /// A key with the lock's name exists but is not a lock (not a hash, or a hash without TTL
    /// whose fields are not hold counts: somebody's data), or, for a semaphore or a count-down
    /// latch, not a string holding an integer. It was left untouched.
    WrongType {
        /// The name of the lock, semaphore or latch.
        name: String,
    },
    /// The hold was not there any more when it was released: its lease expired, it was
    /// force-unlocked, or another owner has the lock now. Nothing was changed on Redis. (Also
    /// when the hold was found lost and the same thread holds the lock again by a newer hold,
    /// which is left alone: nothing is sent then.)
    NotHeld {
        /// The lock name.
        name: String,
    },
    /// A permit-expirable semaphore's permit was not acquired when it was released: it was
    /// released already, its lease ended (it came back by itself), or it never was. Nothing
    /// was changed on Redis. [`is_not_held`](Error::is_not_held) answers for it.
    PermitNotHeld {
        /// The semaphore's name.
        name: String,
        /// The permit's id, as given.
        id: String,
    },
    /// The manager could not start one of its background threads.
    ThreadSpawn {
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An operation did not finish in time: Redis did not answer within the response timeout,
    /// or no pooled connection became free.
    Timeout {
        /// What timed out.
        operation: &'static str,
        /// How long the command that timed out was waited for, retries on a new connection
        /// included; zero where that is not known (the message then gives no duration). A
        /// blocking call's own wait comes on top.
        after: Duration,
    },
    /// No replica acknowledged an acquire within the replica sync timeout although the master
    /// has replicas (see `LockManagerBuilder::replica_sync`): a failover could lose it, so the
    /// hold was rolled back. Redisson's `NoSyncedSlavesException`. With `replicas` 0, on
    /// Sentinel: the master has no replica and the sentinels did not vouch for it (it may be
    /// an old master that a failover replaced and that has not been demoted yet).
    NotReplicated {
        /// What was not acknowledged: `"acquire"`.
        operation: &'static str,
        /// How many replicas the master had.
        replicas: usize,
        /// How long it waited for them.
        timeout: Duration,
    },
    /// Nodes of the deployment failed, each as its error says, in the order they were asked:
    /// the cluster nodes or sentinels asked for the masters, or the master a command or the
    /// start-up needed. The predicates ([`is_timeout`](Error::is_timeout), ...) answer for the
    /// last of them.
    Nodes {
        /// What was asked of them, for the message ("" when one node says it all).
        asked: String,
        /// Each node's `host:port` and what went wrong there.
        tried: Vec<(String, Error)>,
    },
    /// The manager was created in another process: this is a child made by `fork()`, which
    /// inherited the parent's connections, client id and thread numbers but not its
    /// background threads. Nothing was sent. Create a manager in the child instead.
    Forked {
        /// The process that created the manager.
        created_in: u32,
        /// The process that tried to use it.
        used_in: u32,
    },
    /// The call's [`CancelToken`](crate::CancelToken) was cancelled before it returned (or
    /// before it was made: nothing was sent then). The wait left nothing behind: whatever it
    /// had acquired meanwhile was given back.
    Cancelled {
        /// The name of the lock, semaphore or latch waited for.
        name: String,
    },
    /// The manager was shut down ([`LockManager::shutdown`](crate::LockManager::shutdown))
    /// before the call returned, or before it was made (nothing was sent then). As for
    /// [`Error::Cancelled`], nothing was left behind.
    Shutdown {
        /// The name of the lock, semaphore or latch waited for.
        name: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The lock was not (or no longer) held by the releasing owner, or the permit released was
    /// not acquired ([`Error::NotHeld`], [`Error::PermitNotHeld`]).
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. } | Error::PermitNotHeld { .. })
    }

    /// The call's [`CancelToken`](crate::CancelToken) was cancelled (see [`Error::Cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }

    /// The manager was shut down (see [`Error::Shutdown`]).
    pub fn is_shutdown(&self) -> bool {
        matches!(self, Error::Shutdown { .. })
    }

    /// The error of the node asked last, for [`Error::Nodes`]; else the error itself.
    fn last(&self) -> &Error {
        match self {
            Error::Nodes { tried, .. } => tried.last().map_or(self, |(_, err)| err.last()),
            _ => self,
        }
    }

    /// One node's error, saying which node it was.
    pub(crate) fn at(addr: impl Into<String>, err: Error) -> Self {
        Error::Nodes {
            asked: String::new(),
            tried: vec![(addr.into(), err)],
        }
    }

    /// What Redis or the connection reported, for [`Error::Connect`], [`Error::Redis`] and
    /// [`Error::InvalidUrl`] (for [`Error::Nodes`], the last node's); `None` for the errors
    /// that the crate found by itself ([`Error::WrongType`], [`Error::Timeout`], ...).
    pub fn redis_failure(&self) -> Option<&RedisFailure> {
        match self.last() {
            Error::InvalidUrl { source }
            | Error::Connect { source }
            | Error::Redis { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The operation ran out of time (Redis too slow, pool exhausted, or an I/O timeout).
    pub fn is_timeout(&self) -> bool {
        match self.last() {
            Error::Timeout { .. } => true,
            Error::Redis { source, .. } | Error::Connect { source } => {
                source.kind() == FailureKind::Timeout
            }
            _ => false,
        }
    }

    /// The call was refused before anything was sent: a bad name, duration, size or URL.
    pub fn is_invalid_argument(&self) -> bool {
        matches!(
            self.last(),
            Error::InvalidName { .. } | Error::InvalidArgument { .. } | Error::InvalidUrl { .. }
        )
    }

    /// Redis could not be reached, or the connection broke.
    pub fn is_connection_error(&self) -> bool {
        match self.last() {
            Error::Connect { .. } => true,
            Error::Redis { source, .. } => matches!(
                source.kind(),
                FailureKind::Io | FailureKind::Refused | FailureKind::Timeout
            ),
            _ => false,
        }
    }

    /// Redis is away for a while: unreachable, answering LOADING while it reads its data back
    /// after a restart, or in a failover (a cluster without a master for the slot, a demoted
    /// master, a master that lost its link). A thread already waiting rides this out for the
    /// outage grace (`crate::engine::outage`).
    pub(crate) fn is_outage(&self) -> bool {
        self.is_connection_error()
            || matches!(self.last(), Error::Redis { source, .. } if matches!(
                source.code(),
                Some("LOADING" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN" | "READONLY")
            ))
    }

    /// No replica acknowledged an acquire in time; it was rolled back (see
    /// [`Error::NotReplicated`]).
    pub fn is_not_replicated(&self) -> bool {
        matches!(self.last(), Error::NotReplicated { .. })
    }

    /// A key of the lock's (semaphore's, latch's) name holds something else.
    pub fn is_wrong_type(&self) -> bool {
        matches!(self.last(), Error::WrongType { .. })
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// [`Error::Connect`] for a redis-rs error.
    pub(crate) fn connect(source: impl Into<redis::RedisError>) -> Self {
        Error::Connect {
            source: RedisFailure::new(source),
        }
    }

    /// [`Error::InvalidUrl`] for a redis-rs error.
    pub(crate) fn invalid_url(source: impl Into<redis::RedisError>) -> Self {
        Error::InvalidUrl {
            source: RedisFailure::new(source),
        }
    }

    /// [`Error::Redis`] for a redis-rs error.
    pub(crate) fn redis(operation: &'static str, source: impl Into<redis::RedisError>) -> Self {
        Error::Redis {
            operation,
            source: RedisFailure::new(source),
        }
    }

    /// Classifies an error from opening a connection: a database number the server does not
    /// have is the URL's fault, which no retry mends; anything else is a failure to connect.
    pub(crate) fn from_connect(source: redis::RedisError) -> Self {
        // The server's own words since Redis 2 (`ERR DB index is out of range`); redis-rs
        // reports the refused SELECT as a response error with them as its detail.
        if source
            .detail()
            .is_some_and(|detail| detail.contains("DB index is out of range"))
        {
            Error::invalid_url(source)
        } else {
            Error::connect(source)
        }
    }

    /// Classifies an error from a command that ran against the lock named `name`.
    pub(crate) fn from_command(
        operation: &'static str,
        name: &str,
        source: redis::RedisError,
    ) -> Self {
        let code = server_code(&source);
        if code.as_deref() == Some("WRONGTYPE") {
            Error::WrongType {
                name: name.to_owned(),
            }
        } else if matches!(code.as_deref(), Some("NOAUTH" | "WRONGPASS"))
            || source.kind() == redis::ErrorKind::AuthenticationFailed
        {
            // Credentials missing or refused: the connection is useless, not the command.
            Error::connect(source)
        } else {
            Error::redis(operation, source)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidName { reason } => write!(f, "invalid name: {reason}"),
            Error::InvalidArgument { what, reason } => write!(f, "invalid {what}: {reason}"),
            Error::InvalidUrl { source } => write!(f, "invalid Redis URL: {source}"),
            Error::Connect { source } => write!(f, "cannot connect to Redis: {source}"),
            Error::Redis { operation, source } => write!(f, "{operation} failed: {source}"),
            Error::WrongType { name } => write!(
                f,
                "key {} exists but is not a lock, semaphore or latch of the kind asked for (a \
                 lock is a hash of hold counts; a semaphore, a permit-expirable semaphore or a \
                 count-down latch, a string holding an integer); it was left untouched",
                shorten(name)
            ),
            Error::NotHeld { name } => write!(
                f,
                "lock {} is not held by this owner (lease expired, force-unlocked, or taken by another owner)",
                shorten(name)
            ),
            Error::PermitNotHeld { name, id } => write!(
                f,
                "permit {} of semaphore {} is not acquired (released already, its lease ended, \
                 or it never was); nothing was changed",
                shorten(id),
                shorten(name)
            ),
            Error::ThreadSpawn { source } => {
                write!(f, "cannot start a background thread: {source}")
            }
            Error::Timeout { operation, after } if after.is_zero() => {
                write!(f, "{operation} timed out")
            }
            Error::Timeout { operation, after } => {
                write!(f, "{operation} timed out after {after:?}")
            }
            Error::NotReplicated {
                operation,
                replicas: 0,
                ..
            } => write!(
                f,
                "{operation} was taken on a master without replicas that the sentinels do not \
                 name as their settled master (a failover may have replaced it), so it was \
                 rolled back"
            ),
            Error::NotReplicated {
                operation,
                replicas,
                timeout,
            } => write!(
                f,
                "{operation} was not acknowledged by any of the master's {replicas} replica(s) \
                 within {timeout:?}; a failover could have lost it, so it was rolled back"
            ),
            Error::Nodes { asked, tried } => write_nodes(f, asked, tried),
            Error::Forked {
                created_in,
                used_in,
            } => write!(
                f,
                "this LockManager was created in process {created_in} and cannot be used in \
                 process {used_in} after fork(): its connections, client id and thread numbers \
                 belong to the parent; create the manager in the child"
            ),
            Error::Cancelled { name } => {
                write!(f, "the wait for {} was cancelled", shorten(name))
            }
            Error::Shutdown { name } => write!(
                f,
                "the LockManager was shut down; the wait for {} ended",
                shorten(name)
            ),
        }
    }
}

/// [`Error::Nodes`]' message: what was asked, then each node's error, saying which node.
fn write_nodes(f: &mut fmt::Formatter<'_>, asked: &str, tried: &[(String, Error)]) -> fmt::Result {
    if !asked.is_empty() {
        write!(f, "{asked}: ")?;
    }
    for (i, (addr, err)) in tried.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        match err {
            Error::Connect { source } => write!(f, "cannot connect to Redis at {addr}: {source}")?,
            err => write!(f, "{addr}: {err}")?,
        }
    }
    Ok(())
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidUrl { source }
            | Error::Connect { source }
            | Error::Redis { source, .. } => Some(source.redis()),
            Error::ThreadSpawn { source } => Some(source),
            Error::Nodes { tried, .. } => tried.last().map(|(_, err)| err as _),
            _ => None,
        }
    }
}

/// Quotes a lock name for a message, cutting very long names so an error stays readable.
fn shorten(name: &str) -> String {
    const MAX: usize = 200;
    if name.len() <= MAX {
        return format!("{name:?}");
    }
    let mut end = MAX;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &name[..end], name.len())
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_timeout_gives_its_duration_only_when_known() {
        let known = Error::Timeout {
            operation: "acquire",
            after: Duration::from_millis(3104),
        };
        assert_eq!(known.to_string(), "acquire timed out after 3.104s");
        let unknown = Error::Timeout {
            operation: "renew",
            after: Duration::ZERO,
        };
        assert_eq!(unknown.to_string(), "renew timed out");
    }
}

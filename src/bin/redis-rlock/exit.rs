//! Exit codes and the failures that end the command, with their message.
//!
//! The codes follow sysexits(3), as flock(1) and many daemons' tools do, so that a script can
//! tell "try again later" (75) from "you called me wrong" (64) from "Redis is down" (69).

use std::fmt;

/// Bad arguments: usage errors, bad durations, URLs or lock names (EX_USAGE).
pub const USAGE: u8 = 64;
/// The key exists and is not a lock (EX_DATAERR).
pub const DATA: u8 = 65;
/// Redis cannot be reached or failed to answer (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran (EX_SOFTWARE: the protection failed).
pub const LOST: u8 = 70;
/// The operating system refused something (a thread, a signal handler) (EX_OSERR).
pub const OS: u8 = 71;
/// Not acquired within `--wait`: the default of `--conflict-exit-code` (EX_TEMPFAIL).
pub const CONFLICT: u8 = 75;
/// The command exists but could not be executed, as in shells.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found, as in shells.
pub const NOT_FOUND: u8 = 127;

/// Why the command stops early: a message for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A failure of the library, classified by what a script can do about it. `url` is named
    /// (without its password) when the connection failed, since that is what to check.
    pub fn from_lock_error(err: redis_rlock::Error, url: &str) -> Self {
        if let redis_rlock::Error::InvalidUrl { source } = &err {
            if err.to_string().contains("expected ")
                || source.kind() == redis_rlock::FailureKind::Server
            {
                // The library named the forms already, or the URL parsed and the server
                // refused what it names (a database number it does not have).
                return Failure::new(USAGE, err.to_string());
            }
            Failure::new(
                USAGE,
                format!(
                    "{err}; expected redis://[user:password@]host[:port][/db], rediss://... \
                     or redis+unix:///path/to/socket"
                ),
            )
        } else if err.is_invalid_argument() {
            Failure::new(USAGE, err.to_string())
        } else if err.is_wrong_type() {
            Failure::new(DATA, err.to_string())
        } else if err.is_connection_error() || err.is_timeout() {
            Failure::new(UNAVAILABLE, format!("{err} (at {})", redact(url)))
        } else if let redis_rlock::Error::ThreadSpawn { .. } = err {
            Failure::new(OS, err.to_string())
        } else {
            // Any other error from Redis (a refused script, a read-only replica, ...): the
            // service is not usable as it is.
            Failure::new(UNAVAILABLE, err.to_string())
        }
    }

    /// A failure of a plain redis-rs connection (the status queries).
    pub fn from_redis_error(err: redis::RedisError, name: &str, url: &str) -> Self {
        if err.code() == Some("WRONGTYPE") {
            Failure::new(
                DATA,
                format!("key {name:?} exists but is not a lock (not a hash of hold counts)"),
            )
        } else if err.kind() == redis::ErrorKind::InvalidClientConfig {
            Failure::new(USAGE, format!("invalid Redis URL: {err}"))
        } else {
            Failure::new(
                UNAVAILABLE,
                format!("Redis failed: {err} (at {})", redact(url)),
            )
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(redact("redis://:s3cret@db:6379/0"), "redis://***@db:6379/0");
        assert_eq!(redact("redis://127.0.0.1/"), "redis://127.0.0.1/");
    }
}

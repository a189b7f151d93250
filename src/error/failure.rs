//! [`RedisFailure`]: what Redis, or the connection to it, reported, kept as this crate's own
//! data so that no type of the client library (redis-rs) is part of the public API: a new
//! major version of redis-rs is then not a breaking change for the crate's users. Also what
//! the crate reads from a redis-rs error: the server's code, an interrupted read (EINTR).

use std::fmt;

/// What Redis, or the connection to it, reported when a call failed: the `source` of
/// [`Error::Connect`](crate::Error::Connect), [`Error::Redis`](crate::Error::Redis) and
/// [`Error::InvalidUrl`](crate::Error::InvalidUrl) (see also
/// [`Error::redis_failure`](crate::Error::redis_failure)).
///
/// [`kind`](Self::kind) says what sort of failure it was; for an error reply,
/// [`code`](Self::code) and [`detail`](Self::detail) say what the server answered. Its
/// [`Display`](fmt::Display) text is the client library's message, which the crate's own
/// messages quote. That library's error is its [`source`](std::error::Error::source) (and the
/// `source` of the [`Error`](crate::Error) that carries it): its type is not part of this
/// crate's API and may change in any release, so it is for logs, not for matching.
///
/// ```
/// use redis_rlock::{Error, FailureKind};
///
/// /// Whether the same call may succeed later, as far as Redis' side of it goes.
/// fn worth_retrying(err: &Error) -> bool {
///     let Some(failure) = err.redis_failure() else {
///         return err.is_timeout();
///     };
///     match failure.kind() {
///         FailureKind::Refused | FailureKind::Timeout | FailureKind::Io => true,
///         FailureKind::Server => matches!(
///             failure.code(),
///             Some("LOADING" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN")
///         ),
///         _ => false,
///     }
/// }
/// ```
#[derive(Debug, Clone)]
pub struct RedisFailure {
    kind: FailureKind,
    code: Option<String>,
    detail: Option<String>,
    error: redis::RedisError,
}

/// What sort of failure a [`RedisFailure`] was. New kinds may be added (the enum is
/// `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// Redis answered with an error reply: [`RedisFailure::code`] says which (`WRONGTYPE`,
    /// `NOSCRIPT`, `MOVED`, `LOADING`, `READONLY`, `NOPERM`, `ERR`, ...).
    Server,
    /// The server refused the credentials, or wanted some (`WRONGPASS`, `NOAUTH`, or a
    /// refused `AUTH`).
    Authentication,
    /// Nobody accepted the connection: nothing listens at the address, or a Unix socket that
    /// does not exist.
    Refused,
    /// A read or a write on the connection timed out.
    Timeout,
    /// The connection broke (reset, closed, ended in the middle of a reply), or another I/O
    /// error (unreachable host, a TLS handshake that failed, ...).
    Io,
    /// A reply that the client could not read or did not expect (a reply of another type, a
    /// server that does not speak RESP3 when it was asked to).
    Protocol,
    /// Refused by the client before anything was sent: settings or a URL it cannot use.
    Client,
    /// None of the above.
    Other,
}

impl RedisFailure {
    /// What sort of failure it was.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The server's error code (`WRONGTYPE`, `NOSCRIPT`, `MOVED`, `ERR`, ...): the first word
    /// of its error reply, or of the first error reply when several commands were sent at
    /// once. For a command that failed inside a script on Redis 6, which wraps that
    /// command's error in an `ERR`, the inner command's code (as on Redis 7 and Valkey).
    /// `None` when the server did not answer with an error (a broken connection, a timeout,
    /// ...).
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// What the failure says beyond its code: for an error reply, the server's words after
    /// the code (`Operation against a key holding the wrong kind of value`); for a failure
    /// on this side, what was wrong, where the client says it. `None` when there is nothing
    /// more (the [`Display`](fmt::Display) text says what there is).
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// Keeps what a redis-rs error says, classified.
    pub(crate) fn new(error: impl Into<redis::RedisError>) -> Self {
        let error = error.into();
        let first = first_reply(&error);
        RedisFailure {
            kind: kind_of(&error),
            code: server_code(&error),
            detail: error
                .detail()
                .map(str::to_owned)
                .or_else(|| first.and_then(|(_, detail)| detail)),
            error,
        }
    }

    /// The redis-rs error, for the crate's own classification.
    pub(crate) fn redis(&self) -> &redis::RedisError {
        &self.error
    }
}

impl fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for RedisFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The kind of `err`: the connection's failures first (redis-rs reports them all as I/O),
/// then refused credentials, which a server reports with a code of its own.
fn kind_of(err: &redis::RedisError) -> FailureKind {
    use redis::ErrorKind as K;
    if err.is_timeout() {
        FailureKind::Timeout
    } else if err.is_connection_refusal() {
        FailureKind::Refused
    } else if err.is_io_error() || err.is_connection_dropped() {
        FailureKind::Io
    } else if err.kind() == K::AuthenticationFailed
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        FailureKind::Authentication
    } else if err.code().is_some() || first_reply(err).is_some() {
        FailureKind::Server
    } else {
        match err.kind() {
            K::Parse | K::UnexpectedReturnType | K::RESP3NotSupported => FailureKind::Protocol,
            K::InvalidClientConfig | K::Client => FailureKind::Client,
            _ => FailureKind::Other,
        }
    }
}

/// The code and detail of the first error reply of a pipeline, where redis-rs keeps them
/// per command and reports none for the whole.
fn first_reply(err: &redis::RedisError) -> Option<(String, Option<String>)> {
    if err.code().is_some() {
        return None;
    }
    let errors = err.clone().into_server_errors()?;
    let (_, first) = errors.first()?;
    Some((first.code().to_owned(), first.details().map(str::to_owned)))
}

/// The server's error code (`WRONGTYPE`, `NOAUTH`, ...), also when the error came from a
/// pipeline (the first command's), and when a command inside a script failed on Redis 6,
/// which wraps its error in an `ERR` (`ERR Error running script (call to f_...):
/// @user_script:1: WRONGTYPE Operation ...`; Redis 7 and Valkey pass the inner code on).
pub(crate) fn server_code(err: &redis::RedisError) -> Option<String> {
    let code = match err.code() {
        Some(code) => code.to_owned(),
        None => first_reply(err)?.0,
    };
    if code == "ERR" {
        if let Some(inner) = err.detail().and_then(script_error_code) {
            return Some(inner.to_owned());
        }
    }
    Some(code)
}

/// Whether `err` is an I/O error of kind `Interrupted` (EINTR).
pub(crate) fn is_interrupted(err: &redis::RedisError) -> bool {
    use std::error::Error as _;
    if !err.is_io_error() {
        return false;
    }
    // redis-rs keeps the io::Error behind an `Arc<dyn Error>` and shows it only as the source;
    // should that change, this says false and the connect fails as it did before.
    let source = err.source();
    let io = source
        .and_then(|s| s.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>())
        .and_then(|arc| arc.downcast_ref::<std::io::Error>())
        .or_else(|| source.and_then(|s| s.downcast_ref::<std::io::Error>()));
    io.is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
}

/// The code of the error a command raised inside a script, from Redis 6's wrapper's detail.
fn script_error_code(detail: &str) -> Option<&str> {
    let (_, after) = detail.split_once("@user_script:")?;
    let (_, message) = after.split_once(": ")?;
    let code = message.split(' ').next()?;
    (!code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase())).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error redis-rs makes of `reply`, an error reply as it comes on the wire.
    fn replied(reply: &[u8]) -> redis::RedisError {
        match redis::parse_redis_value(reply) {
            Ok(redis::Value::ServerError(err)) => err.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn an_error_reply_gives_its_code_and_detail() {
        let failure = RedisFailure::new(replied(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ));
        assert_eq!(failure.kind(), FailureKind::Server);
        assert_eq!(failure.code(), Some("WRONGTYPE"));
        assert_eq!(
            failure.detail(),
            Some("Operation against a key holding the wrong kind of value")
        );
        let unknown = RedisFailure::new(replied(b"-NOTACODE we know of\r\n"));
        assert_eq!(
            (unknown.kind(), unknown.code(), unknown.detail()),
            (FailureKind::Server, Some("NOTACODE"), Some("we know of"))
        );
    }

    #[test]
    fn the_connection_s_failures_are_told_apart() {
        let io = |kind| RedisFailure::new(std::io::Error::from(kind));
        use std::io::ErrorKind as Io;
        assert_eq!(io(Io::ConnectionRefused).kind(), FailureKind::Refused);
        assert_eq!(io(Io::TimedOut).kind(), FailureKind::Timeout);
        assert_eq!(io(Io::WouldBlock).kind(), FailureKind::Timeout);
        assert_eq!(io(Io::ConnectionReset).kind(), FailureKind::Io);
        assert_eq!(io(Io::ConnectionReset).code(), None);
        let made = |kind| RedisFailure::new((kind, "made", "here".to_owned()));
        use redis::ErrorKind as K;
        assert_eq!(
            made(K::AuthenticationFailed).kind(),
            FailureKind::Authentication
        );
        assert_eq!(made(K::InvalidClientConfig).kind(), FailureKind::Client);
        assert_eq!(made(K::UnexpectedReturnType).kind(), FailureKind::Protocol);
        assert_eq!(made(K::Client).detail(), Some("here"));
        let wrongpass = RedisFailure::new(replied(b"-WRONGPASS invalid password\r\n"));
        assert_eq!(wrongpass.kind(), FailureKind::Authentication);
        assert_eq!(wrongpass.code(), Some("WRONGPASS"));
    }

    #[test]
    fn its_text_and_source_are_the_client_library_s() {
        use std::error::Error as _;
        let err = replied(b"-NOSCRIPT No matching script\r\n");
        let failure = RedisFailure::new(err.clone());
        assert_eq!(failure.to_string(), err.to_string());
        let source = failure.source().expect("a source");
        assert_eq!(source.to_string(), err.to_string());
    }

    #[test]
    fn it_can_cross_threads_and_be_boxed() {
        fn boxable<T: std::error::Error + Send + Sync + 'static>() {}
        boxable::<RedisFailure>();
        boxable::<crate::Error>();
    }

    #[test]
    fn redis_6_script_errors_are_read_for_their_inner_code() {
        let wrapped = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "script",
            "Error running script (call to f_1a2b): @user_script:1: WRONGTYPE Operation \
             against a key holding the wrong kind of value"
                .to_owned(),
        ));
        assert_eq!(
            script_error_code(wrapped.detail().unwrap()),
            Some("WRONGTYPE")
        );
        assert_eq!(RedisFailure::new(wrapped).code(), Some("WRONGTYPE"));
        assert_eq!(script_error_code("Error running script: not one"), None);
        assert_eq!(script_error_code("x @user_script:3: oops lower"), None);
    }

    #[test]
    fn only_an_interrupted_io_error_is_taken_for_one() {
        let io = |kind| redis::RedisError::from(std::io::Error::from(kind));
        // The downcast follows redis-rs' private representation: this fails if that changes.
        assert!(is_interrupted(&io(std::io::ErrorKind::Interrupted)));
        assert!(!is_interrupted(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(!is_interrupted(&io(std::io::ErrorKind::WouldBlock)));
        let other = redis::RedisError::from((redis::ErrorKind::Io, "interrupted, in words only"));
        assert!(!is_interrupted(&other));
    }
}

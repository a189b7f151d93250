"""The exceptions of redis_rlock: one class per kind of error of the Rust crate.

They live in Python (not in the native module) so that some can also derive from the built-in
exception that Python code already catches: ``Timeout`` is a ``TimeoutError``,
``ConnectionFailed`` a ``ConnectionError``, ``InvalidArgument`` a ``ValueError``.
"""


class LockError(Exception):
    """The base of every error that redis_rlock raises about locks and Redis."""


class InvalidArgument(LockError, ValueError):
    """An argument was refused before anything was sent (a duration, size, count...)."""


class InvalidName(InvalidArgument):
    """A name was refused before anything was sent: empty, too long, or unusable on a cluster."""


class InvalidUrl(InvalidArgument):
    """The URL could not be parsed, or the server refused what it names."""


class ConnectionFailed(LockError, ConnectionError):
    """Redis could not be reached, or the connection broke."""


class RedisError(LockError):
    """Redis answered a command with an error."""


class WrongType(LockError):
    """A key of that name exists but holds something else; it was left untouched."""


class NotHeld(LockError):
    """The hold was gone when released (expired, force-unlocked, or already released)."""


class PermitNotHeld(NotHeld):
    """A permit-expirable semaphore's permit was not acquired when released."""


class Timeout(LockError, TimeoutError):
    """Redis did not answer in time, or no pooled connection became free."""


class NotReplicated(LockError):
    """No replica acknowledged an acquire in time; it was rolled back."""


class Forked(LockError):
    """The manager was created in another process: create a new one after ``os.fork()``."""


class Cancelled(LockError):
    """The call's ``CancelToken`` was cancelled; the wait left nothing behind."""


class Shutdown(LockError):
    """The manager was shut down; the wait left nothing behind."""


# Shown (and pickled) as redis_rlock.<name>, where users import them from.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, LockError):
        _cls.__module__ = "redis_rlock"
del _cls

__all__ = [
    "LockError",
    "InvalidArgument",
    "InvalidName",
    "InvalidUrl",
    "ConnectionFailed",
    "RedisError",
    "WrongType",
    "NotHeld",
    "PermitNotHeld",
    "Timeout",
    "NotReplicated",
    "Forked",
    "Cancelled",
    "Shutdown",
]

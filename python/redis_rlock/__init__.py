"""Redisson-compatible distributed locks for threaded Python programs.

A thin layer over the Rust crate redis-rlock: reentrant per thread, owner-checked on release,
renewed by one watchdog thread per manager, waiters woken by pub/sub, stored exactly as Redisson
stores them (a Java service using Redisson and a Python service can share a lock).

    from redis_rlock import LockManager

    with LockManager("redis://127.0.0.1:6379/") as manager:
        with manager.lock("orders:42"):
            ...  # critical section

Every call that can wait releases the GIL, takes ``cancel=`` (a ``CancelToken``), and on the
main thread is interrupted by Ctrl-C (``KeyboardInterrupt``, nothing left in Redis).
"""

from ._errors import (
    Cancelled,
    ConnectionFailed,
    Forked,
    InvalidArgument,
    InvalidName,
    InvalidUrl,
    LockError,
    NotHeld,
    NotReplicated,
    PermitNotHeld,
    RedisError,
    Shutdown,
    Timeout,
    WrongType,
)
from ._native import (
    CancelToken,
    CountDownLatch,
    Guard,
    Lock,
    LockManager,
    LostEvent,
    PermitExpirableSemaphore,
    ReadWriteLock,
    Seconds,
    Semaphore,
)

__all__ = [
    "LockManager",
    "Lock",
    "ReadWriteLock",
    "Guard",
    "LostEvent",
    "CancelToken",
    "Semaphore",
    "PermitExpirableSemaphore",
    "CountDownLatch",
    "Seconds",
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

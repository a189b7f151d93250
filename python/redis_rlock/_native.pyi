"""Types of the native module redis_rlock._native (re-exported by redis_rlock)."""

import datetime
from types import TracebackType
from typing import Any, List, Optional, Type, Union, final

__all__ = [
    "CancelToken",
    "CountDownLatch",
    "Guard",
    "Lock",
    "LockManager",
    "LostEvent",
    "PermitExpirableSemaphore",
    "ReadWriteLock",
    "Seconds",
    "Semaphore",
]

#: Seconds as an int or float, or a datetime.timedelta.
Seconds = Union[int, float, datetime.timedelta]

@final
class CancelToken:
    """A cancellation flag: ``cancel()`` ends every wait given this token, now and later."""

    def __new__(cls) -> "CancelToken": ...
    def cancel(self) -> None:
        """Cancels every wait given this token (they raise ``Cancelled``). Idempotent."""
    def is_cancelled(self) -> bool:
        """Whether ``cancel()`` was called."""

@final
class LostEvent:
    """A ``threading.Event``-like object, set when the guard's lock is found lost."""

    def is_set(self) -> bool:
        """Whether the lock was found lost."""
    def wait(
        self, timeout: Optional[Seconds] = None, cancel: Optional[CancelToken] = None
    ) -> bool:
        """Waits until set or ``timeout`` passes (``None``: no limit); returns ``is_set()``.
        ``cancel`` ends the wait with ``Cancelled``."""

@final
class Guard:
    """One hold of a lock; a context manager that releases it on exit, also after an exception."""

    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def fencing_token(self) -> Optional[int]:
        """The fencing token of a fenced acquire, else ``None``."""
    @property
    def lease(self) -> Optional[float]:
        """The fixed lease in seconds; ``None`` when the watchdog renews the lock."""
    @property
    def lost_event(self) -> LostEvent:
        """Set when the lock is found lost (the same object on every access)."""
    def unlock(self) -> None:
        """Releases this hold; ``NotHeld`` if it was gone or already released."""
    def is_lost(self) -> bool:
        """Whether the lock is known lost. No I/O."""
    def is_held(self) -> bool:
        """Whether this guard was not released yet."""
    def __enter__(self) -> "Guard": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Lock:
    """A lock of one name and kind: Redisson's calls, and a ``threading.RLock`` stand-in."""

    @property
    def name(self) -> str:
        """The lock's name, which is also its Redis key."""
    @property
    def kind(self) -> str:
        """``"lock"``, ``"fair"``, ``"spin"``, ``"string"``, ``"read"`` or ``"write"``."""
    def lock(self, cancel: Optional[CancelToken] = None) -> Guard:
        """Waits as long as it takes; the watchdog renews the lock while held."""
    def try_lock(self, wait: Seconds, cancel: Optional[CancelToken] = None) -> Optional[Guard]:
        """Waits up to ``wait``; ``None`` when it passed."""
    def lock_with_lease(self, lease: Seconds, cancel: Optional[CancelToken] = None) -> Guard:
        """Waits as long as it takes; the lock expires ``lease`` after it was taken."""
    def try_lock_with_lease(
        self, wait: Seconds, lease: Seconds, cancel: Optional[CancelToken] = None
    ) -> Optional[Guard]:
        """Waits up to ``wait``, with a fixed ``lease``; ``None`` when the wait passed."""
    def lock_fenced(self, cancel: Optional[CancelToken] = None) -> Guard:
        """Like ``lock()``, and the guard carries a fencing token."""
    def try_lock_fenced(
        self, wait: Seconds, cancel: Optional[CancelToken] = None
    ) -> Optional[Guard]:
        """Like ``try_lock()``, and the guard carries a fencing token."""
    def is_locked(self) -> bool:
        """Whether anyone holds the lock."""
    def is_held_by_current_thread(self) -> bool:
        """Whether the calling thread holds it through this manager."""
    def hold_count(self) -> int:
        """How many holds the calling thread has."""
    def remaining_ttl(self) -> Optional[float]:
        """The remaining lease in seconds; ``None`` when nobody holds the lock."""
    def force_unlock(self) -> bool:
        """Deletes the lock whoever holds it; ``False`` when it was free."""
    def acquire(
        self,
        blocking: object = True,
        timeout: Optional[Seconds] = -1,
        cancel: Optional[CancelToken] = None,
    ) -> bool:
        """``threading.RLock.acquire``: whether it acquired within ``timeout`` (-1: no limit)."""
    def release(self) -> None:
        """``threading.RLock.release``: ``RuntimeError`` if this thread holds nothing."""
    def __enter__(self) -> bool: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class ReadWriteLock:
    """Redisson's ``RReadWriteLock``: a shared and an exclusive half on one name."""

    @property
    def name(self) -> str:
        """The name, which is also its Redis key."""
    def read_lock(self) -> Lock:
        """The shared half."""
    def write_lock(self) -> Lock:
        """The exclusive half."""

@final
class Semaphore:
    """Redisson's ``RSemaphore``."""

    @property
    def name(self) -> str:
        """The semaphore's name, which is also its Redis key."""
    def try_set_permits(self, permits: int) -> bool:
        """Sets the number of permits if none is set yet; whether it did."""
    def acquire(self, permits: int = 1, cancel: Optional[CancelToken] = None) -> None:
        """Takes ``permits``, waiting as long as it takes."""
    def try_acquire(
        self, permits: int = 1, wait: Optional[Seconds] = 0.0, cancel: Optional[CancelToken] = None
    ) -> bool:
        """Takes ``permits`` if they become free within ``wait``; whether it did."""
    def release(self, permits: int = 1) -> None:
        """Gives back ``permits``."""
    def available_permits(self) -> int:
        """The permits free now."""
    def add_permits(self, permits: int) -> None:
        """Adds ``permits`` (negative: removes)."""
    def drain_permits(self) -> int:
        """Takes every free permit; how many."""

@final
class PermitExpirableSemaphore:
    """Redisson's ``RPermitExpirableSemaphore``: permits with ids and optional leases."""

    @property
    def name(self) -> str:
        """The semaphore's name, which is also its Redis key."""
    def try_set_permits(self, permits: int) -> bool:
        """Sets the number of permits if none is set yet; whether it did."""
    def set_permits(self, permits: int) -> None:
        """Sets the number of permits."""
    def add_permits(self, permits: int) -> None:
        """Adds ``permits`` (negative: removes)."""
    def acquire(
        self, lease: Optional[Seconds] = None, cancel: Optional[CancelToken] = None
    ) -> str:
        """Takes one permit, waiting as long as it takes; its id."""
    def try_acquire(
        self,
        wait: Optional[Seconds] = 0.0,
        lease: Optional[Seconds] = None,
        cancel: Optional[CancelToken] = None,
    ) -> Optional[str]:
        """Takes one permit if one becomes free within ``wait``; its id or ``None``."""
    def release(self, id: str) -> None:
        """Gives back permit ``id``; ``PermitNotHeld`` if it is not acquired,
        ``InvalidArgument`` if ``id`` is not a permit id (32 hex characters)."""
    def try_release(self, id: str) -> bool:
        """Gives back permit ``id``; whether it was acquired. ``InvalidArgument`` if ``id`` is
        not a permit id."""
    def update_lease_time(self, id: str, lease: Seconds) -> bool:
        """Sets permit ``id``'s lease to ``lease`` from now; whether it was acquired."""
    def available_permits(self) -> int:
        """The permits free now."""
    def acquired_permits(self) -> int:
        """The permits acquired now."""

@final
class CountDownLatch:
    """Redisson's ``RCountDownLatch``."""

    @property
    def name(self) -> str:
        """The latch's name, which is also its Redis key."""
    def try_set_count(self, count: int) -> bool:
        """Sets the count if the latch is not set; whether it did."""
    def count_down(self) -> None:
        """Decrements the count; at zero the waiters are released."""
    def get_count(self) -> int:
        """The count now."""
    def wait(
        self, timeout: Optional[Seconds] = None, cancel: Optional[CancelToken] = None
    ) -> bool:
        """Waits until the count is zero or ``timeout`` passes; whether it is zero."""

@final
class LockManager:
    """A connection to one Redis deployment, shared by threads; one per process."""

    def __new__(cls, url: str, **settings: Any) -> "LockManager":
        """Connects to ``url``; ``settings`` are the builder's (``watchdog_timeout``, ...)."""
    @staticmethod
    def sentinel(urls: List[str], master_name: str, **settings: Any) -> "LockManager":
        """Connects to the master ``master_name`` that the sentinels at ``urls`` name."""
    @staticmethod
    def cluster(urls: List[str], **settings: Any) -> "LockManager":
        """Connects to the Redis Cluster that the nodes at ``urls`` belong to."""
    @property
    def client_id(self) -> str:
        """The id that owner fields start with (``<client_id>:<thread>``)."""
    @property
    def watchdog_timeout(self) -> float:
        """The watchdog's lease in seconds."""
    def lock(self, name: str, cancel: Optional[CancelToken] = None) -> Guard:
        """Waits as long as it takes for lock ``name``."""
    def try_lock(
        self, name: str, wait: Seconds, cancel: Optional[CancelToken] = None
    ) -> Optional[Guard]:
        """Waits up to ``wait`` for lock ``name``; ``None`` when it passed."""
    def lock_with_lease(
        self, name: str, lease: Seconds, cancel: Optional[CancelToken] = None
    ) -> Guard:
        """Waits as long as it takes for lock ``name``, with a fixed ``lease``."""
    def try_lock_with_lease(
        self, name: str, wait: Seconds, lease: Seconds, cancel: Optional[CancelToken] = None
    ) -> Optional[Guard]:
        """Waits up to ``wait`` for lock ``name``, with a fixed ``lease``."""
    def lock_fenced(self, name: str, cancel: Optional[CancelToken] = None) -> Guard:
        """Like ``lock()``, with a fencing token."""
    def try_lock_fenced(
        self, name: str, wait: Seconds, cancel: Optional[CancelToken] = None
    ) -> Optional[Guard]:
        """Like ``try_lock()``, with a fencing token."""
    def get_lock(self, name: str) -> Lock:
        """Redisson's ``getLock``."""
    def get_fair_lock(self, name: str) -> Lock:
        """Redisson's ``getFairLock``."""
    def get_spin_lock(self, name: str) -> Lock:
        """Redisson's ``getSpinLock``."""
    def get_string_lock(self, name: str) -> Lock:
        """redis-py's lock format (``redis.lock.Lock``): a string key holding the owner's token."""
    def get_read_write_lock(self, name: str) -> ReadWriteLock:
        """Redisson's ``getReadWriteLock``."""
    def get_semaphore(self, name: str) -> Semaphore:
        """Redisson's ``getSemaphore``."""
    def get_permit_expirable_semaphore(self, name: str) -> PermitExpirableSemaphore:
        """Redisson's ``getPermitExpirableSemaphore``."""
    def get_count_down_latch(self, name: str) -> CountDownLatch:
        """Redisson's ``getCountDownLatch``."""
    def shutdown(self) -> None:
        """Stops the manager: waits and acquires raise ``Shutdown``; ``acquire()`` holds are
        released. Calls that do not wait (``is_locked()``, releases, ...) keep working."""
    def is_shut_down(self) -> bool:
        """Whether ``shutdown()`` was called."""
    def __enter__(self) -> "LockManager": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

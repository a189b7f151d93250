"""Every public name of redis_rlock, on a real server."""

import datetime
import threading
import time

import pytest

import redis_rlock
from redis_rlock import LockManager


def test_manager_shorthands_return_guards(manager, name, raw):
    with manager.lock(name) as guard:
        assert isinstance(guard, redis_rlock.Guard)
        assert guard.name == name
        assert guard.fencing_token is None
        assert guard.lease is None
        assert not guard.is_lost()
        assert raw.exists(name) == 1
    assert raw.exists(name) == 0

    guard = manager.try_lock(name, 0.5)
    assert guard is not None
    guard.unlock()

    guard = manager.lock_with_lease(name, 10)
    assert guard.lease == pytest.approx(10.0)
    assert 0 < raw.pttl(name) <= 10_000
    guard.unlock()

    guard = manager.try_lock_with_lease(name, datetime.timedelta(seconds=1), 5.5)
    assert guard.lease == pytest.approx(5.5)
    guard.unlock()

    first = manager.lock_fenced(name)
    assert isinstance(first.fencing_token, int)
    first.unlock()
    second = manager.try_lock_fenced(name, 1)
    assert second.fencing_token > first.fencing_token
    second.unlock()
    assert raw.exists(name) == 0


def test_try_lock_returns_none_when_held_elsewhere(manager, name):
    with manager.lock(name):
        seen = []
        t = threading.Thread(target=lambda: seen.append(manager.try_lock(name, 0.1)))
        t.start()
        t.join()
        assert seen == [None]


def test_guard_releases_after_an_exception(manager, name, raw):
    with pytest.raises(ZeroDivisionError):
        with manager.lock(name):
            assert raw.exists(name) == 1
            1 / 0
    assert raw.exists(name) == 0


def test_guard_unlocked_inside_with_is_not_released_twice(manager, name, raw):
    with manager.lock(name) as guard:
        guard.unlock()
        assert not guard.is_held()
    assert raw.exists(name) == 0
    with pytest.raises(redis_rlock.NotHeld):
        guard.unlock()


def test_lost_event_is_set_when_the_lock_is_lost(url, name, raw):
    # The shortest watchdog timeout: renewals every ~170 ms find the hold gone quickly.
    with LockManager(url, watchdog_timeout=0.5) as m:
        guard = m.lock(name)
        event = guard.lost_event
        assert event is guard.lost_event
        assert not event.is_set()
        assert not event.wait(0.05)
        raw.delete(name)
        assert event.wait(30), "the watchdog did not report the lost lock"
        assert event.is_set()
        assert guard.is_lost()
        with pytest.raises(redis_rlock.NotHeld):
            guard.unlock()


@pytest.mark.parametrize(
    "kind", ["get_lock", "get_fair_lock", "get_spin_lock", "get_string_lock", "read", "write"]
)
def test_every_kind_is_a_redisson_lock(manager, name, kind):
    lock = kind_of(manager, name, kind)
    assert isinstance(lock, redis_rlock.Lock)
    assert lock.name == name
    assert not lock.is_locked()
    assert lock.remaining_ttl() is None
    with lock.lock() as outer:
        assert lock.is_locked()
        assert lock.is_held_by_current_thread()
        inner = lock.try_lock(0)
        assert lock.hold_count() == 2
        inner.unlock()
        assert lock.hold_count() == 1
        assert 0 < lock.remaining_ttl() <= 3.0
        assert not outer.is_lost()
    assert not lock.is_locked()
    lock.lock_with_lease(5).unlock()
    kept = lock.try_lock_with_lease(1, 5)
    assert kept is not None
    assert lock.force_unlock()
    assert not lock.force_unlock()
    if kind in ("read", "get_string_lock"):
        with pytest.raises(redis_rlock.InvalidArgument):
            lock.lock_fenced()
    else:
        with lock.lock_fenced() as g:
            assert isinstance(g.fencing_token, int)
        g = lock.try_lock_fenced(1)
        assert isinstance(g.fencing_token, int)
        g.unlock()


@pytest.mark.parametrize(
    "kind", ["get_lock", "get_fair_lock", "get_spin_lock", "get_string_lock", "read", "write"]
)
def test_every_kind_is_a_threading_rlock(manager, name, kind):
    lock = kind_of(manager, name, kind)
    assert lock.acquire() is True
    assert lock.acquire(blocking=True, timeout=1) is True
    assert lock.acquire(False) is True
    assert lock.hold_count() == 3
    assert lock._is_owned()
    for _ in range(3):
        lock.release()
    assert not lock.is_locked()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.is_held_by_current_thread()
        # Another handle on the same lock releases what this one took, as threading's would.
        other = kind_of(manager, name, kind)
        assert other.acquire()
        other.release()
    assert not lock.is_locked()
    with pytest.raises(ValueError):
        lock.acquire(False, 1)


def test_rlock_drop_in_excludes_other_threads(manager, name):
    lock = manager.get_lock(name)
    lock.acquire()
    results = []
    t = threading.Thread(target=lambda: results.append(lock.acquire(timeout=0.1)))
    t.start()
    t.join()
    assert results == [False]
    with pytest.raises(RuntimeError):
        # Another thread cannot release this thread's hold.
        run_in_thread(lock.release)
    lock.release()
    t = threading.Thread(target=lambda: results.append(lock.acquire(blocking=False)))
    t.start()
    t.join()
    assert results == [False, True]


def test_threading_condition_over_the_lock(manager, name):
    lock = manager.get_lock(name)
    cond = threading.Condition(lock)
    ready = []

    def producer():
        with cond:
            ready.append(1)
            cond.notify()

    with cond:
        t = threading.Thread(target=producer)
        t.start()
        assert cond.wait_for(lambda: ready, timeout=30)
    t.join()
    assert not lock.is_locked()


def test_read_write_lock(manager, name):
    rw = manager.get_read_write_lock(name)
    assert isinstance(rw, redis_rlock.ReadWriteLock)
    assert rw.name == name
    assert rw.read_lock().kind == "read" and rw.write_lock().kind == "write"
    with rw.read_lock().lock():
        # Readers share: another thread reads too, but cannot write.
        got = run_in_thread(lambda: (rw.read_lock().try_lock(1) is not None,
                                     rw.write_lock().try_lock(0.1)))
        assert got == (True, None)


def test_semaphore(manager, name):
    s = manager.get_semaphore(name)
    assert isinstance(s, redis_rlock.Semaphore)
    assert s.name == name
    assert s.try_set_permits(3)
    assert not s.try_set_permits(5)
    assert s.available_permits() == 3
    s.acquire()
    s.acquire(2)
    assert s.available_permits() == 0
    assert s.try_acquire() is False
    assert s.try_acquire(1, 0.05) is False
    s.release(2)
    assert s.try_acquire(permits=2, wait=1) is True
    s.add_permits(4)
    assert s.available_permits() == 4
    assert s.drain_permits() == 4
    s.release(3)
    # A waiter is woken by a release from another thread.
    s.drain_permits()
    t = threading.Timer(0.2, lambda: s.release(1))
    t.start()
    assert s.try_acquire(1, 30)
    t.join()


def test_permit_expirable_semaphore(manager, name):
    s = manager.get_permit_expirable_semaphore(name)
    assert isinstance(s, redis_rlock.PermitExpirableSemaphore)
    assert s.name == name
    assert s.try_set_permits(1)
    permit = s.acquire()
    assert isinstance(permit, str)
    assert s.acquired_permits() == 1 and s.available_permits() == 0
    assert s.try_acquire(0.05) is None
    assert s.update_lease_time(permit, 10)
    s.release(permit)
    with pytest.raises(redis_rlock.PermitNotHeld):
        s.release(permit)
    assert not s.try_release(permit)
    permit = s.try_acquire(wait=1, lease=datetime.timedelta(milliseconds=200))
    assert permit is not None
    # Its lease ends and it comes back by itself.
    assert s.try_acquire(wait=30) is not None
    s.set_permits(2)
    s.add_permits(1)
    assert s.available_permits() >= 1


def test_count_down_latch(manager, name):
    latch = manager.get_count_down_latch(name)
    assert isinstance(latch, redis_rlock.CountDownLatch)
    assert latch.name == name
    assert latch.try_set_count(2)
    assert not latch.try_set_count(5)
    assert latch.get_count() == 2
    assert latch.wait(0.05) is False
    t = threading.Timer(0.1, lambda: (latch.count_down(), latch.count_down()))
    t.start()
    assert latch.wait() is True
    t.join()
    assert latch.get_count() == 0
    assert latch.wait(timeout=datetime.timedelta(0)) is True


def test_cancel_token_ends_a_wait_and_leaves_nothing(manager, name, raw):
    token = redis_rlock.CancelToken()
    assert not token.is_cancelled()
    with manager.lock(name):
        errors = []

        def waiter():
            try:
                manager.lock(name, cancel=token)
            except redis_rlock.Cancelled as e:
                errors.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        token.cancel()
        t.join(30)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], redis_rlock.LockError)
        assert token.is_cancelled()
    assert raw.exists(name) == 0
    # A cancelled token fails every later call at once.
    for call in (lambda: manager.lock(name, cancel=token),
                 lambda: manager.get_semaphore(name + "s").acquire(cancel=token),
                 lambda: manager.get_count_down_latch(name + "l").wait(cancel=token)):
        with pytest.raises(redis_rlock.Cancelled):
            call()


def test_database_setting_replaces_the_urls(url, name):
    with LockManager(url, database=3) as m, LockManager(url.rstrip("/") + "/3") as three, \
            LockManager(url) as zero:
        with m.lock(name):
            assert three.get_lock(name).is_locked()
            assert not zero.get_lock(name).is_locked()
    with pytest.raises((ValueError, OverflowError, TypeError)):
        LockManager(url, database=-1)


def test_manager_context_and_shutdown(url, name):
    with LockManager(url, pool_size=2, connect_timeout=2, response_timeout=2,
                     replica_sync=False, fair_lock_wait_timeout=5,
                     replica_sync_timeout=1, pubsub_protocol="resp2",
                     sharded_pubsub_mode="auto") as m:
        assert m.watchdog_timeout == pytest.approx(30.0)
        assert isinstance(m.client_id, str) and m.client_id
        assert not m.is_shut_down()
        lock = m.get_lock(name)
        lock.acquire()
    assert m.is_shut_down()
    with pytest.raises(redis_rlock.Shutdown):
        m.lock(name)
    # shutdown() released what acquire() held.
    with LockManager(url) as other:
        assert not other.get_lock(name).is_locked()


def test_exceptions_are_lock_errors():
    for cls in (redis_rlock.NotHeld, redis_rlock.Cancelled, redis_rlock.Shutdown,
                redis_rlock.Forked, redis_rlock.ConnectionFailed, redis_rlock.NotReplicated,
                redis_rlock.Timeout, redis_rlock.InvalidArgument, redis_rlock.InvalidName,
                redis_rlock.InvalidUrl, redis_rlock.RedisError, redis_rlock.WrongType,
                redis_rlock.PermitNotHeld):
        assert issubclass(cls, redis_rlock.LockError)
    assert issubclass(redis_rlock.Timeout, TimeoutError)
    assert issubclass(redis_rlock.ConnectionFailed, ConnectionError)
    assert issubclass(redis_rlock.InvalidArgument, ValueError)
    assert set(redis_rlock.__all__) <= set(dir(redis_rlock))


def test_wrong_type(manager, name, raw):
    raw.set(name, "somebody's data")
    with pytest.raises(redis_rlock.WrongType):
        manager.try_lock(name, 0)
    assert raw.get(name) == "somebody's data"


def kind_of(manager, name, kind):
    if kind == "read":
        return manager.get_read_write_lock(name).read_lock()
    if kind == "write":
        return manager.get_read_write_lock(name).write_lock()
    return getattr(manager, kind)(name)


def run_in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_the_stubs_match_the_module():
    import ast
    import os

    stub = os.path.join(os.path.dirname(redis_rlock.__file__), "_native.pyi")
    tree = ast.parse(open(stub).read())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    native = redis_rlock._native
    public = {n for n in dir(native) if not n.startswith("_") and isinstance(getattr(native, n), type)}
    assert set(classes) == public
    for cls_name, node in classes.items():
        cls = getattr(native, cls_name)
        stubbed = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        actual = {n for n in dir(cls) if not n.startswith("_")}
        assert {n for n in stubbed if not n.startswith("_")} == actual, cls_name
        assert cls.__doc__, cls_name
        for method in actual:
            assert getattr(cls, method).__doc__, f"{cls_name}.{method}"


def test_a_guard_dropped_unreleased_is_released(manager, name, raw):
    guard = manager.lock(name)
    assert raw.exists(name) == 1
    del guard  # the last reference: released at once (CPython's reference counting)
    assert raw.exists(name) == 0


def test_cancel_on_the_main_thread(manager, url, name, raw):
    # On the main thread a wait runs with a signal watcher; the user's token still ends it.
    token = redis_rlock.CancelToken()
    with manager.lock(name):
        with LockManager(url) as other:
            timer = threading.Timer(0.2, token.cancel)
            timer.start()
            with pytest.raises(redis_rlock.Cancelled):
                other.get_lock(name).acquire(cancel=token)
            timer.join()
    assert raw.exists(name) == 0


def test_threading_condition_over_a_lock_held_twice(manager, name):
    # Condition.wait releases every level (_release_save) and restores them (_acquire_restore),
    # as over a threading.RLock: the notifier gets in although this thread holds it twice.
    lock = manager.get_lock(name)
    cond = threading.Condition(lock)
    ready = []

    def producer():
        with cond:
            ready.append(1)
            cond.notify()

    with cond:
        with cond:
            t = threading.Thread(target=producer)
            t.start()
            assert cond.wait_for(lambda: ready, timeout=30)
            assert lock.hold_count() == 2
        assert lock.hold_count() == 1
    t.join(30)
    assert not t.is_alive()
    assert not lock.is_locked()
    with pytest.raises(RuntimeError):
        lock._release_save()


@pytest.mark.parametrize("blocking", [0, 1, "", "yes", None, [], [1]])
def test_acquire_takes_any_truthy_blocking(manager, name, blocking):
    lock = manager.get_lock(name)
    assert lock.acquire(blocking) is True
    lock.release()
    holder = manager.get_lock(name)
    done = []
    t = threading.Thread(target=lambda: (holder.acquire(), done.append(1)))
    t.start()
    t.join(30)
    # Another thread holds it now: a non-blocking acquire returns False at once.
    if not blocking:
        assert lock.acquire(blocking) is False
    else:
        assert lock.acquire(blocking, 0.05) is False
    assert done and lock.is_locked()


def test_reprs_are_pythons(manager, name):
    odd = name + "-'\"é\t"
    guard = manager.lock_fenced(odd)
    token = guard.fencing_token
    assert repr(guard) == f"Guard(name={odd!r}, held=True, fencing_token={token})"
    assert repr(guard.lost_event) == "LostEvent(set=False)"
    guard.unlock()
    assert repr(guard) == f"Guard(name={odd!r}, held=False, fencing_token={token})"
    with manager.lock(odd) as plain:
        assert repr(plain) == f"Guard(name={odd!r}, held=True, fencing_token=None)"
    assert repr(redis_rlock.CancelToken()) == "CancelToken(cancelled=False)"
    assert repr(manager.get_fair_lock(odd)) == f"Lock(name={odd!r}, kind='fair')"
    assert repr(manager.get_read_write_lock(odd)) == f"ReadWriteLock(name={odd!r})"
    assert repr(manager.get_semaphore(odd)) == f"Semaphore(name={odd!r})"
    assert repr(manager.get_count_down_latch(odd)) == f"CountDownLatch(name={odd!r})"
    assert repr(manager.get_permit_expirable_semaphore(odd)) == \
        f"PermitExpirableSemaphore(name={odd!r})"
    assert repr(manager) == f"LockManager(client_id={manager.client_id!r})"


def test_lost_event_wait_takes_cancel(manager, name):
    with manager.lock(name) as guard:
        token = redis_rlock.CancelToken()
        token.cancel()
        with pytest.raises(redis_rlock.Cancelled):
            guard.lost_event.wait(cancel=token)
        # Cancelled from another thread while waiting without limit.
        token = redis_rlock.CancelToken()
        canceller = threading.Timer(0.2, token.cancel)
        canceller.start()
        started = time.monotonic()
        with pytest.raises(redis_rlock.Cancelled):
            guard.lost_event.wait(None, cancel=token)
        assert time.monotonic() - started < 10
        canceller.join()


def test_a_failed_release_on_exit_keeps_the_body_exception_as_context(manager, name):
    # Leaving `with` after an exception: the body's exception goes on, unless the release
    # fails; then NotHeld is raised, the body's exception its __context__ (not lost).
    with pytest.raises(ValueError):
        with manager.lock(name):
            raise ValueError("body")
    with pytest.raises(redis_rlock.NotHeld) as info:
        with manager.lock(name):
            manager.get_lock(name).force_unlock()
            raise ValueError("body")
    assert isinstance(info.value.__context__, ValueError)

"""Bad input gets a clear exception, never a panic or a hang."""

import math
import threading

import pytest

import redis_rlock
from redis_rlock import LockManager
from servers import free_port


@pytest.mark.parametrize("call", [
    lambda m, n: m.lock(123),
    lambda m, n: m.lock(None),
    lambda m, n: m.try_lock(n, "1"),
    lambda m, n: m.try_lock(n, None),
    lambda m, n: m.try_lock(n, True),
    lambda m, n: m.lock_with_lease(n, [1]),
    lambda m, n: m.get_semaphore(n).acquire("2"),
    lambda m, n: m.get_lock(n).lock(cancel="yes"),
    lambda m, n: m.get_count_down_latch(n).try_set_count("x"),
])
def test_wrong_types_are_type_errors(manager, name, call):
    with pytest.raises(TypeError):
        call(manager, name)


@pytest.mark.parametrize("wait", [-1, -0.001, math.nan, math.inf])
def test_bad_waits_are_value_errors(manager, name, wait):
    for call in (lambda: manager.try_lock(name, wait),
                 lambda: manager.get_fair_lock(name).try_lock(wait),
                 lambda: manager.get_semaphore(name).try_acquire(1, wait),
                 lambda: manager.get_count_down_latch(name).wait(wait),
                 lambda: manager.get_lock(name).acquire(timeout=wait if wait != -1 else -2)):
        with pytest.raises(redis_rlock.InvalidArgument) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert "wait" in str(info.value) or "timeout" in str(info.value)


def test_zero_lease_is_refused(manager, name):
    with pytest.raises(redis_rlock.InvalidArgument):
        manager.lock_with_lease(name, 0)


def test_empty_name(manager):
    for call in (lambda: manager.lock(""), lambda: manager.get_lock("").is_locked(),
                 lambda: manager.get_semaphore("").available_permits(),
                 lambda: manager.get_count_down_latch("").get_count()):
        with pytest.raises(redis_rlock.InvalidName) as info:
            call()
        assert "empty" in str(info.value)


@pytest.mark.parametrize("url", ["", "foo://bar", "redis://127.0.0.1:notaport/", "not a url"])
def test_bad_urls(url):
    with pytest.raises(redis_rlock.InvalidUrl):
        LockManager(url)


def test_nothing_listening_is_a_connection_error():
    with pytest.raises(redis_rlock.ConnectionFailed) as info:
        LockManager(f"redis://127.0.0.1:{free_port()}/", connect_timeout=2)
    assert isinstance(info.value, ConnectionError)


def test_bad_settings(url):
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        LockManager(url, watchdog=30)
    with pytest.raises(TypeError):
        LockManager(url, pool_size="8")
    with pytest.raises(redis_rlock.InvalidArgument):
        LockManager(url, pool_size=0)
    with pytest.raises(redis_rlock.InvalidArgument):
        LockManager(url, pool_size=-1)
    with pytest.raises(redis_rlock.InvalidArgument):
        LockManager(url, watchdog_timeout=0.1)
    with pytest.raises(ValueError):
        LockManager(url, pubsub_protocol="resp9")
    with pytest.raises(TypeError):
        LockManager.sentinel("redis://127.0.0.1:1/", "m", bogus=1)


def test_out_of_range_counts(manager, name):
    # Negative or too large for the count's type: a ValueError naming the range.
    semaphore = manager.get_semaphore(name)
    for call in (lambda: semaphore.acquire(-1), lambda: semaphore.try_acquire(-1),
                 lambda: semaphore.release(-1), lambda: semaphore.try_set_permits(-1),
                 lambda: semaphore.acquire(2**32), lambda: semaphore.add_permits(2**31),
                 lambda: manager.get_permit_expirable_semaphore(name).set_permits(-5),
                 lambda: manager.get_count_down_latch(name).try_set_count(-1)):
        with pytest.raises(redis_rlock.InvalidArgument, match="is not between"):
            call()
    with pytest.raises(redis_rlock.InvalidArgument):
        manager.get_semaphore(name).try_acquire(0)


@pytest.mark.parametrize("wait", [9.3e18, 1.7e19, 10**19, 2**63])
def test_too_long_waits_are_value_errors_everywhere(manager, name, wait):
    # Whatever the thread and whether the lock is free: the wait is checked before any try.
    lock = manager.get_lock(name)
    calls = [lambda: manager.try_lock(name, wait),
             lambda: manager.try_lock_with_lease(name, wait, 5),
             lambda: manager.try_lock_fenced(name, wait),
             lambda: lock.acquire(timeout=wait),
             lambda: manager.get_semaphore(name).try_acquire(1, wait),
             lambda: manager.get_count_down_latch(name).wait(wait)]
    for call in calls:
        for thread in (False, True):
            errors = []

            def run():
                try:
                    call()
                except BaseException as e:  # noqa: BLE001 - the panic is a BaseException
                    errors.append(e)

            if thread:
                t = threading.Thread(target=run)
                t.start()
                t.join(30)
                assert not t.is_alive()
            else:
                run()
            assert len(errors) == 1 and isinstance(errors[0], redis_rlock.InvalidArgument), errors
    assert not lock.is_locked()


def test_too_long_lost_event_wait_is_a_value_error(manager, name):
    with manager.lock(name) as guard:
        with pytest.raises(redis_rlock.InvalidArgument):
            guard.lost_event.wait(1.7e19)


def test_a_malformed_permit_id_is_a_value_error(manager, name):
    # As the stub says: a malformed id is bad input; a well-formed one not acquired is
    # PermitNotHeld.
    semaphore = manager.get_permit_expirable_semaphore(name)
    assert semaphore.try_set_permits(1)
    for call in (semaphore.release, semaphore.try_release):
        with pytest.raises(redis_rlock.InvalidArgument):
            call("bogus")
    with pytest.raises(redis_rlock.PermitNotHeld):
        semaphore.release("0123456789abcdef0123456789abcdef")
    assert semaphore.try_release("0123456789abcdef0123456789abcdef") is False

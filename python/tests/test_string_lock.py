"""The string lock (`get_string_lock`) next to redis-py's own `redis.lock.Lock` on one name:
each sees the other's hold, neither releases the other's, and they contend without overlap."""

import threading

import pytest

import redis_rlock

redis = pytest.importorskip("redis")


def test_a_redis_py_hold_and_ours_are_seen_and_left_alone_by_the_other(manager, raw, name):
    ours = manager.get_string_lock(name)
    assert ours.kind == "string"
    theirs = raw.lock(name, timeout=30)
    assert theirs.acquire(blocking=False)
    assert ours.is_locked()
    assert not ours.is_held_by_current_thread()
    assert ours.hold_count() == 0
    assert 20 < ours.remaining_ttl() <= 30
    assert ours.try_lock(0) is None
    theirs.release()
    assert not ours.is_locked()

    with ours.lock():
        token = raw.get(name)
        assert token.startswith(manager.client_id + ":"), token
        assert theirs.locked()
        assert not theirs.owned()
        assert not theirs.acquire(blocking=False)
        # redis-py's release script refuses a token that is not its own.
        other = raw.lock(name, timeout=30)
        other.local.token = b"not-ours"
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            other.release()
        assert raw.get(name) == token
    assert not theirs.locked()


def test_redis_py_and_our_threads_contend_without_overlap(manager, raw, name):
    rounds = {"ours": 20, "theirs": 10}
    inside = threading.Lock()
    counter = [0]
    overlaps = []
    errors = []

    def critical_section():
        if not inside.acquire(blocking=False):
            overlaps.append(1)
            return
        try:
            before = counter[0]
            threading.Event().wait(0.002)
            counter[0] = before + 1
        finally:
            inside.release()

    def ours():
        lock = manager.get_string_lock(name)
        try:
            for _ in range(rounds["ours"]):
                with lock.try_lock(60):
                    critical_section()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def theirs():
        try:
            for _ in range(rounds["theirs"]):
                lock = raw.lock(name, timeout=30, sleep=0.01, blocking_timeout=60)
                assert lock.acquire()
                critical_section()
                lock.release()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=ours) for _ in range(2)]
    threads += [threading.Thread(target=theirs) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert not overlaps, "two holders at once"
    assert counter[0] == 2 * rounds["ours"] + 2 * rounds["theirs"]
    assert not raw.exists(name)


def test_a_hash_lock_and_a_string_lock_of_one_name_are_never_both_held(manager, name):
    with manager.get_lock(name).lock():
        # The holding thread is told before anything is sent; another gets WRONGTYPE.
        with pytest.raises(redis_rlock.InvalidArgument):
            manager.get_string_lock(name).try_lock(0)
        out = {}

        def other_thread():
            try:
                out["got"] = manager.get_string_lock(name).try_lock(0)
            except redis_rlock.LockError as e:
                out["error"] = e

        t = threading.Thread(target=other_thread)
        t.start()
        t.join(30)
        assert isinstance(out.get("error"), redis_rlock.WrongType), out

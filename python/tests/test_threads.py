"""The GIL is released while a call waits, and the owner of a hold is the Python thread."""

import threading
import time

import redis_rlock


def test_other_threads_run_while_one_waits(manager, name):
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    entered = threading.Event()
    got = []

    def waiter():
        entered.set()
        got.append(manager.try_lock(name, 20))

    guard = manager.lock(name)
    counting = threading.Thread(target=count)
    counting.start()
    waiting = threading.Thread(target=waiter)
    waiting.start()
    assert entered.wait(30)
    start = counter[0]
    deadline = time.monotonic() + 15
    while counter[0] < start + 100_000 and time.monotonic() < deadline:
        time.sleep(0.001)
    advanced = counter[0] - start
    # Had the waiter kept the GIL, nothing else would have run until its 20 s wait ended.
    assert waiting.is_alive(), "the waiter returned before the lock was released"
    assert advanced >= 100_000, f"the counting thread advanced by {advanced} only"
    guard.unlock()
    waiting.join(30)
    stop.set()
    counting.join()
    assert got and got[0] is not None
    got[0].unlock()


def test_reentrancy_is_per_python_thread(manager, name):
    lock = manager.get_lock(name)
    with lock.lock():
        with lock.lock():
            assert lock.hold_count() == 2
        seen = {}

        def other():
            seen["count"] = lock.hold_count()
            seen["held"] = lock.is_held_by_current_thread()
            seen["try"] = lock.try_lock(0)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen == {"count": 0, "held": False, "try": None}


def test_a_guard_released_from_another_thread(manager, name, raw):
    guard = manager.lock(name)
    errors = []

    def release():
        try:
            guard.unlock()
        except redis_rlock.LockError as e:
            errors.append(e)

    t = threading.Thread(target=release)
    t.start()
    t.join()
    assert errors == []
    assert raw.exists(name) == 0


def test_threads_exclude_each_other(manager, name, raw):
    counter_key = name + ":counter"
    raw.set(counter_key, 0)
    inside = [0]
    overlaps = []

    def work():
        for _ in range(20):
            with manager.lock(name):
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(inside[0])
                value = int(raw.get(counter_key))
                raw.set(counter_key, value + 1)
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert int(raw.get(counter_key)) == 80

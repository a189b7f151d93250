"""W1, W2 and W3 of loadgen for Python's distributed locks, on one throwaway server:

- redis_rlock (this package, through its threading.RLock interface),
- python-redis-lock 4.x (SET NX, waiters woken by BLPOP on a signal list),
- redis-py's Lock (SET NX, waiters poll every 100 ms by default).

W1: one thread, acquire + release, uncontended: cycle time.
W2: 4 threads, one lock, each critical section GETs and SETs a counter in Redis: cycles/s
    (the counter is checked: a lock that let two threads in would lose increments).
W3: handoff: from the holder's release() returned to the waiter's acquire() returned.

    pip install ./python python-redis-lock redis    # a release build of redis_rlock
    python python/bench/bench.py [--quick]
"""

import argparse
import os
import statistics
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from servers import Server  # noqa: E402

import redis_rlock  # noqa: E402

try:
    import redis_lock  # python-redis-lock
except ImportError:  # pragma: no cover - the table says it is missing
    redis_lock = None


class Ours:
    label = "redis_rlock"

    def __init__(self, url, client):
        self.manager = redis_rlock.LockManager(url)

    def new(self, name):
        return self.manager.get_lock(name)

    def close(self):
        self.manager.shutdown()


class PythonRedisLock:
    label = "python-redis-lock"

    def __init__(self, url, client):
        self.client = client

    def new(self, name):
        return _PerThread(lambda: redis_lock.Lock(self.client, name, expire=30))

    def close(self):
        pass


class RedisPyLock:
    label = "redis-py Lock"

    def __init__(self, url, client):
        self.client = client

    def new(self, name):
        return _PerThread(lambda: self.client.lock(name, timeout=30))

    def close(self):
        pass


class _PerThread:
    """One lock object per thread: the peers' objects hold one token each (not reentrant)."""

    def __init__(self, make):
        self.make = make
        self.local = threading.local()

    def _lock(self):
        if not hasattr(self.local, "lock"):
            self.local.lock = self.make()
        return self.local.lock

    def acquire(self):
        return self._lock().acquire()

    def release(self):
        self._lock().release()


def w1(impl, client, cycles):
    lock = impl.new(f"bench:w1:{uuid.uuid4().hex}")
    samples = []
    for _ in range(cycles):
        start = time.perf_counter()
        lock.acquire()
        lock.release()
        samples.append(time.perf_counter() - start)
    return samples


def w2(impl, client, seconds, threads=4):
    name = f"bench:w2:{uuid.uuid4().hex}"
    counter = name + ":counter"
    client.set(counter, 0)
    lock = impl.new(name)
    done = [0] * threads
    stop = time.monotonic() + seconds

    def work(i):
        while time.monotonic() < stop:
            lock.acquire()
            client.set(counter, int(client.get(counter)) + 1)
            lock.release()
            done[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start = time.monotonic()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.monotonic() - start
    assert int(client.get(counter)) == sum(done), "increments lost: the lock let two in"
    return sum(done) / elapsed


def w3(impl, client, rounds):
    lock = impl.new(f"bench:w3:{uuid.uuid4().hex}")
    released, acquired = [], []
    go, back = threading.Event(), threading.Event()

    def waiter():
        for _ in range(rounds):
            go.wait()
            go.clear()
            lock.acquire()
            acquired.append(time.perf_counter())
            lock.release()
            back.set()

    t = threading.Thread(target=waiter)
    t.start()
    for _ in range(rounds):
        lock.acquire()
        go.set()
        time.sleep(0.02)  # the waiter is blocked in acquire() by then
        lock.release()
        released.append(time.perf_counter())
        back.wait()
        back.clear()
    t.join()
    return [a - r for a, r in zip(acquired, released)]


def pct(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cycles (a smoke run)")
    args = parser.parse_args()
    cycles, seconds, rounds = (300, 1.0, 10) if args.quick else (3000, 3.0, 50)
    server = Server()
    client = server.client()
    impls = [Ours, RedisPyLock] + ([PythonRedisLock] if redis_lock else [])
    rows = []
    try:
        for cls in impls:
            impl = cls(server.url, client)
            try:
                w1(impl, client, cycles // 10)  # warm-up
                s1 = w1(impl, client, cycles)
                rate = w2(impl, client, seconds)
                s3 = w3(impl, client, rounds)
            finally:
                impl.close()
            rows.append((cls.label, statistics.median(s1), pct(s1, 0.99), rate,
                         statistics.median(s3), pct(s3, 0.99)))
    finally:
        server.stop()
    print(f"W1 {cycles} cycles, W2 4 threads for "
          f"{seconds} s, W3 {rounds} handoffs")
    print("| lock | W1 p50 | W1 p99 | W2 cycles/s | W3 handoff p50 | W3 p99 |")
    print("|---|---|---|---|---|---|")
    for label, p50, p99, rate, h50, h99 in rows:
        print(f"| {label} | {p50 * 1e6:.1f} µs | {p99 * 1e6:.1f} µs | {rate:.0f} | "
              f"{h50 * 1e6:.1f} µs | {h99 * 1e6:.1f} µs |")
    if not redis_lock:
        print("(python-redis-lock is not installed: pip install python-redis-lock)")


if __name__ == "__main__":
    main()

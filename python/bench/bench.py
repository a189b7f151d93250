"""W1, W2 and W3 of loadgen for Python's distributed locks, on one throwaway server:

- redis_rlock (this package, through its threading.RLock interface),
- python-redis-lock 4.x (SET NX, waiters woken by BLPOP on a signal list),
- redis-py's Lock (SET NX, waiters poll every 100 ms by default).

W1: one thread, acquire + release, uncontended: cycle time.
W2: 4 threads, one lock, each critical section GETs and SETs a counter in Redis: cycles/s
    (the counter is checked: a lock that let two threads in would lose increments).
W3: handoff: from the holder's release() returned to the waiter's acquire() returned.

    pip install ./python python-redis-lock redis    # a release build of redis_rlock
    cargo build --release -p redis-rlock-python --example rust_w1
    python python/bench/bench.py [--quick] [--rust-w1 target/release/examples/rust_w1]
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from servers import Server  # noqa: E402

import redis_rlock  # noqa: E402

try:
    import redis_lock as python_redis_lock  # the package python-redis-lock
except ImportError:  # pragma: no cover - the table says it is missing
    python_redis_lock = None


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
        return _PerThread(lambda: python_redis_lock.Lock(self.client, name, expire=30))

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


#: W1's interleaved rounds.
ROUNDS = 10


def pct(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cycles (a smoke run)")
    parser.add_argument("--rust-w1", metavar="PATH",
                        help="the rust_w1 example (cargo build --release -p redis-rlock-python "
                             "--example rust_w1): the crate's own W1 on the same server")
    args = parser.parse_args()
    cycles, seconds, rounds = (300, 1.0, 10) if args.quick else (3000, 3.0, 50)
    server = Server()
    client = server.client()
    impls = [Ours, RedisPyLock] + ([PythonRedisLock] if python_redis_lock else [])
    # W1 in interleaved rounds (Rust, then each Python lock), so that the load of a shared
    # machine falls on all of them alike.
    opened = [cls(server.url, client) for cls in impls]
    w1_samples = {impl.label: [] for impl in opened}
    w1_p50s = {impl.label: [] for impl in opened}
    rust_p50s = []
    rows = []
    try:
        for impl in opened:
            w1(impl, client, cycles // 10)  # warm-up
        for _ in range(ROUNDS):
            if args.rust_w1:
                out = subprocess.run([args.rust_w1, server.url, str(cycles // ROUNDS)],
                                     check=True, capture_output=True, text=True).stdout.split()
                rust_p50s.append(float(out[0]))
            for impl in opened:
                samples = w1(impl, client, cycles // ROUNDS)
                w1_samples[impl.label] += samples
                w1_p50s[impl.label].append(statistics.median(samples))
        for impl in opened:
            s1 = w1_samples[impl.label]
            rate = w2(impl, client, seconds)
            s3 = w3(impl, client, rounds)
            # The median of the rounds' p50s, as for the Rust crate's: a round that a burst of
            # load on the machine slowed counts once, whichever lock it fell on.
            rows.append((impl.label, statistics.median(w1_p50s[impl.label]), pct(s1, 0.99), rate,
                         statistics.median(s3), pct(s3, 0.99)))
    finally:
        for impl in opened:
            impl.close()
        server.stop()
    rust = statistics.median(rust_p50s) if rust_p50s else None
    print(f"W1 {cycles} cycles, W2 4 threads for "
          f"{seconds} s, W3 {rounds} handoffs")
    print("| lock | W1 p50 (median of rounds) | W1 p99 | W2 cycles/s | W3 handoff p50 | W3 p99 |")
    print("|---|---|---|---|---|---|")
    for label, p50, p99, rate, h50, h99 in rows:
        print(f"| {label} | {p50 * 1e6:.1f} µs | {p99 * 1e6:.1f} µs | {rate:.0f} | "
              f"{h50 * 1e6:.1f} µs | {h99 * 1e6:.1f} µs |")
    if rust:
        print(f"| redis-rlock (Rust) | {rust:.1f} µs | | | | |")
        print(f"W1 p50 of redis_rlock over the Rust crate's: {rows[0][1] * 1e6 / rust:.2f}")
    if not python_redis_lock:
        print("(python-redis-lock is not installed: pip install python-redis-lock)")


if __name__ == "__main__":
    main()

"""Smoke tests on Sentinel and on a cluster of three masters and three replicas."""

import threading

import pytest

import redis_rlock
from servers import Cluster, Sentinel


@pytest.fixture(scope="module")
def sentinel():
    s = Sentinel()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.stop()


def exclusive(manager, name):
    with manager.lock(name) as guard:
        assert not guard.is_lost()
        seen = []
        t = threading.Thread(target=lambda: seen.append(manager.try_lock(name, 0.1)))
        t.start()
        t.join()
        assert seen == [None]
    assert not manager.get_lock(name).is_locked()


def test_sentinel(sentinel, name):
    with redis_rlock.LockManager.sentinel(sentinel.urls, Sentinel.MASTER) as m:
        exclusive(m, name)
        lock = m.get_fair_lock(name)
        assert lock.acquire(timeout=5)
        lock.release()
    assert sentinel.master.client().exists(name) == 0


def test_cluster(cluster, name):
    with redis_rlock.LockManager.cluster(cluster.urls[:2]) as m:
        # Names on different slots, so on different masters.
        for i in range(6):
            exclusive(m, f"{name}:{i}")
        s = m.get_semaphore(name)
        assert s.try_set_permits(1)
        assert s.try_acquire(1, 1)
        s.release()

"""Fixtures: one Redis server for the whole run (each test uses names of its own), a fresh
manager per test, shut down after it."""

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import redis_rlock  # noqa: E402
from servers import Server  # noqa: E402


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def url(server):
    return server.url


@pytest.fixture
def raw(server):
    """A plain redis-py client on the same server, to look at what is in Redis."""
    return server.client()


@pytest.fixture
def manager(url):
    m = redis_rlock.LockManager(url, watchdog_timeout=3.0)
    yield m
    m.shutdown()


@pytest.fixture
def name():
    """A lock name no other test uses."""
    return f"py-test:{uuid.uuid4().hex[:12]}"

"""After os.fork() the child gets Forked from the parent's manager, never a hang."""

import os
import time

import redis_rlock


def run_in_child(body):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child hung")
        time.sleep(0.01)


def test_the_child_gets_forked_and_can_make_its_own_manager(manager, url, name, raw):
    guard = manager.lock(name)

    def child():
        try:
            manager.lock(name + ":child")
            return 2
        except redis_rlock.Forked:
            pass
        try:
            manager.get_lock(name).is_locked()
            return 3
        except redis_rlock.Forked:
            pass
        # The parent's guard, dropped in the child, must not release the parent's hold.
        with redis_rlock.LockManager(url) as own:
            with own.lock(name + ":child"):
                pass
        return 0

    assert run_in_child(child) == 0
    assert raw.hlen(name) == 1, "the child released the parent's hold"
    guard.unlock()
    assert raw.exists(name) == 0

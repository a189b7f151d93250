"""Python next to other clients of the same locks: the `redis-rlock` command (the Rust
crate) contending on one name, and a Java holder played by Redisson's own scripts."""

import os
import subprocess
import threading
import time
import uuid

import redis_rlock

HERE = os.path.dirname(os.path.abspath(__file__))
#: The command, built with `cargo build --features cli` (scripts/test-python builds it).
CLI = os.environ.get(
    "REDIS_RLOCK_CLI_BIN",
    os.path.join(HERE, "..", "..", "target", "debug", "redis-rlock"),
)

# RedissonLock.tryLockInnerAsync and unlockInnerAsync, as Redisson sends them.
REDISSON_LOCK = """
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);
"""
REDISSON_UNLOCK = """
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call('publish', KEYS[2], ARGV[1]);
    return 1;
end;
return nil;
"""


def test_a_redisson_holder_wakes_a_python_waiter(manager, raw, name):
    java = f"{uuid.uuid4()}:1"
    channel = f"redisson_lock__channel:{{{name}}}"
    assert raw.eval(REDISSON_LOCK, 1, name, 30_000, java) is None
    got = []
    acquired_at = []

    def waiter():
        guard = manager.lock(name)
        acquired_at.append(time.monotonic())
        got.append(guard)

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 30
    while raw.pubsub_numsub(channel)[0][1] < 1:
        assert time.monotonic() < deadline, "the Python waiter never subscribed"
        time.sleep(0.01)
    assert got == []
    released_at = time.monotonic()
    assert raw.eval(REDISSON_UNLOCK, 2, name, channel, 0, 30_000, java) == 1
    t.join(30)
    assert got, "the Python waiter was not woken"
    # Woken by the unlock message, not by the 30 s lease running out.
    handoff = acquired_at[0] - released_at
    print(f"Redisson unlock -> Python acquire: {handoff * 1000:.1f} ms")
    assert handoff < 5
    # Now Python holds it, and the Java side is refused with the remaining TTL.
    assert raw.eval(REDISSON_LOCK, 1, name, 30_000, java) > 0
    got[0].unlock()
    assert raw.eval(REDISSON_LOCK, 1, name, 30_000, java) is None
    assert raw.eval(REDISSON_UNLOCK, 2, name, channel, 0, 30_000, java) == 1


def test_python_and_the_rust_command_never_overlap(manager, url, name, tmp_path):
    assert os.access(CLI, os.X_OK), f"{CLI} is missing: cargo build --features cli"
    journal = tmp_path / "journal"
    journal.touch()

    def section(who):
        with open(journal, "a") as f:
            f.write(f"{who} in\n")
            f.flush()
            time.sleep(0.005)
            f.write(f"{who} out\n")

    def python_side():
        for _ in range(10):
            with manager.lock(name):
                section("py")

    def rust_side():
        script = (f'echo "rs in" >> {journal}; sleep 0.005; echo "rs out" >> {journal}')
        for _ in range(10):
            subprocess.run([CLI, "run", name, "--url", url, "--", "sh", "-c", script],
                           check=True, timeout=60)

    threads = [threading.Thread(target=python_side), threading.Thread(target=python_side),
               threading.Thread(target=rust_side)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = journal.read_text().split("\n")[:-1]
    assert len(lines) == 60
    for i in range(0, 60, 2):
        who, what = lines[i].split()
        assert what == "in" and lines[i + 1] == f"{who} out", lines[i:i + 2]
    assert {line.split()[0] for line in lines} == {"py", "rs"}
    assert not manager.get_lock(name).is_locked()


def test_every_exception_class_is_raised_with_the_crates_message(manager, name):
    guard = manager.lock(name)
    manager.get_lock(name).force_unlock()
    try:
        guard.unlock()
    except redis_rlock.NotHeld as e:
        assert name in str(e)
    else:
        raise AssertionError("NotHeld was not raised")

"""The stubs (redis_rlock/_native.pyi) agree with the module: mypy's stubtest, when mypy is
installed (scripts/test-python installs it)."""

import os
import subprocess
import sys

import pytest

import redis_rlock


def test_stubtest_finds_no_difference():
    pytest.importorskip("mypy.stubtest")
    # Not from python/, where redis_rlock/ lacks the native module.
    here = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, "-m", "mypy.stubtest", "redis_rlock"],
                         cwd=here, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_seconds_is_exported():
    assert "Seconds" in redis_rlock.__all__
    assert redis_rlock.Seconds is not None

"""python/README.md's quick start runs as written, given a server in REDIS_URL."""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def quick_start():
    with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_quick_start_runs_as_written(url, raw, name):
    # In a child: it runs as a user's script would, with REDIS_URL set as the README says.
    env = dict(os.environ, REDIS_URL=url)
    run = subprocess.run([sys.executable, "-c", quick_start()], cwd=HERE, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert raw.exists("orders:42") == 0

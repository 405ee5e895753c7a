"""`lanner bench kestrel`'s servers: the CPU time of a server's whole process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from lanner.tools.bench.kestrel_servers import tree_cpu_seconds

BUSY_CHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.process_time() + 0.3\\n"
                          "while time.process_time() < end: pass\\ninput()"], stdin=sys.stdin)
child.wait()
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads Linux's /proc")
def test_a_servers_cpu_counts_the_processes_under_it() -> None:
    """A parent that only waits, whose child burns 0.3 s of CPU: the tree's CPU is the
    child's, counted while the child lives (a `--processes N` server's are its children)."""
    parent = subprocess.Popen([sys.executable, "-c", BUSY_CHILD], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        spent = tree_cpu_seconds(parent.pid)
        while (spent is None or spent < 0.3) and time.monotonic() < deadline:
            time.sleep(0.05)
            spent = tree_cpu_seconds(parent.pid)
        assert spent is not None
        assert spent >= 0.3
    finally:
        parent.communicate(b"\n", timeout=120)
    assert tree_cpu_seconds(parent.pid) is None  # gone: nothing to tell

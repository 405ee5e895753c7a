"""A pool stops when told, at any moment, and leaves no process behind.

`lanner worker` runs in a session of its own (Workspace.start_worker): every process it
forks, and every process they fork, stays in that session, so "no process of the session
is alive" means no orphan, wherever it was reparented.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time

import pytest

from .conftest import Workspace, session_processes, wait_until
from .pool_support import WORK, running_pool, supervising

pytestmark = pytest.mark.slow

CHILDREN = 8
EXIT_WITHIN = 20.0  # the shutdown timeout is 60 s: a pool that waits for it fails
GONE_WITHIN = 15.0


def forked(worker: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait (without sleeping: the moment matters) until the supervisor forked a child."""
    while len(session_processes(worker.pid)) < 2:
        assert worker.poll() is None, "the worker exited before forking"
        assert time.monotonic() < deadline, "no child forked"


def start(ws: Workspace, *args: str) -> subprocess.Popen[bytes]:
    ws.write_module(WORK)
    return ws.start_worker("-A", ws.module_name, "-Q", "work", "-c", str(CHILDREN),
                           "--shutdown-timeout", "60", *args)  # fmt: skip


def assert_all_gone(ws: Workspace, worker: subprocess.Popen[bytes]) -> None:
    try:
        worker.wait(timeout=EXIT_WITHIN)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the supervisor did not exit within {EXIT_WITHIN:g} s:\n{ws.log()}")
    wait_until(lambda: not session_processes(worker.pid), GONE_WITHIN,
               "every worker process to exit", details=ws.log)  # fmt: skip


@pytest.mark.parametrize("moment", ["at-spawn", "while-forking"])
def test_sigterm_while_the_pool_starts_stops_it_at_once(workspace: Workspace, moment: str) -> None:
    worker = start(workspace)
    if moment == "while-forking":
        forked(worker, time.monotonic() + 30)
    worker.send_signal(signal.SIGTERM)
    assert_all_gone(workspace, worker)


def test_a_second_sigterm_while_the_pool_starts_leaves_no_process(workspace: Workspace) -> None:
    worker = start(workspace)
    forked(worker, time.monotonic() + 30)
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "warm shutdown" in workspace.log(), 10, "the first signal to be handled")
    worker.send_signal(signal.SIGTERM)
    assert_all_gone(workspace, worker)


@pytest.mark.parametrize("moment", ["while-forking", "idle"])
def test_a_killed_supervisor_leaves_no_worker_process(workspace: Workspace, moment: str) -> None:
    worker = start(workspace)
    if moment == "while-forking":
        forked(worker, time.monotonic() + 30)
    else:  # every child up, blocked in its long polls of the empty queue
        wait_until(lambda: len(session_processes(worker.pid)) == CHILDREN + 1, 30,
                   "the children to start", details=workspace.log)  # fmt: skip
        wait_until(lambda: "pool started" in workspace.log(), 10, "the pool to start")
    worker.send_signal(signal.SIGKILL)
    assert_all_gone(workspace, worker)


def test_a_pool_out_of_file_descriptors_keeps_trying_and_stops_cleanly(
    workspace: Workspace,
) -> None:
    # Each process costs the supervisor three descriptors: 30 of them do not fit in 64.
    workspace.write_module(WORK)
    worker = workspace.start_worker("-A", workspace.module_name, "-Q", "work", "-c", "30",
                                    open_files=64)  # fmt: skip
    wait_until(lambda: "cannot start a worker process" in workspace.log(), 30,
               "the supervisor to run out of descriptors", details=workspace.log)  # fmt: skip
    assert worker.poll() is None, workspace.log()
    worker.send_signal(signal.SIGTERM)
    assert_all_gone(workspace, worker)
    assert worker.returncode == 0, workspace.log()
    assert "Traceback" not in workspace.log()


def test_ten_thousand_processes_are_refused_at_once(workspace: Workspace) -> None:
    workspace.write_module(WORK)
    began = time.monotonic()
    worker = workspace.start_worker("-A", workspace.module_name, "-c", "10000")
    try:
        code = worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    lines = workspace.log().splitlines()
    assert code == 1, workspace.log()
    assert lines == [
        "Error: Invalid value for '-c' / '--concurrency': 10000 is not in the range 1<=x<=256."
    ]
    assert time.monotonic() - began < 30
    assert not session_processes(worker.pid)


def test_a_clean_start_and_stop_say_so_in_plain_words(
    workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = workspace.write_module(WORK)
    jid = tasks.Work.publish(None, 0.01)
    with caplog.at_level(logging.INFO, logger="lanner.pool"):
        with running_pool(tasks.app, concurrency=1) as pool:
            wait_until(lambda: pool.processed == 1, 30, "the job to run", step=supervising(pool))
        with running_pool(tasks.app, concurrency=2):
            pass
    said = [record.getMessage() for record in caplog.records]
    started = [line for line in said if line.startswith("pool started")]
    assert started[0].startswith(f"pool started: 1 process on {tasks.app.settings.broker},")
    assert started[1].startswith("pool started: 2 processes on")
    assert not [line for line in said if "died" in line or "giving back" in line], said
    assert workspace.job(jid).state == "complete"

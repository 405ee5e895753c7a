"""Real pools whose processes run many jobs at once (`tasks_per_process`), on every engine.

Concurrency is read from what the tasks record (a job starting in a process before another
one there ended), never from how long anything took. The faults are a process killed
from outside while it holds 50 jobs, a poison job that kills its process among innocent
ones, a job stuck in C code past its time limit beside others, and a warm shutdown with
jobs in flight: each job's outcome is checked, and no innocent job spends a retry.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence

import pytest

from lanner import JobState

from .conftest import Line, Workspace, wait_until
from .pool_support import all_complete, done_count, running_pool, states, supervising

pytestmark = pytest.mark.slow

QUEUES = 'QueueConfig("work", batch_size=10, visibility_timeout_sec=90, long_poll_time_sec=0.2)'

TASKS = """
import asyncio
import lanner

STARTED = []  # jids started in this process


def first_run():
    job = lanner.current_job()
    return sum(1 for event in job.history if event.what == "popped") <= 1  # SQS keeps none


class Nap(Task):
    app = app
    queue = "work"
    time_limit = 80
    max_retries = 3

    async def run_task(self, seconds):
        record("start", self.task_id)
        STARTED.append(self.task_id)
        await asyncio.sleep(seconds if first_run() else 0)
        record("end", self.task_id)


class Doze(Task):
    app = app
    queue = "work"
    time_limit = 80
    max_retries = 3

    def run_task(self, seconds):
        record("start", self.task_id)
        time.sleep(seconds)
        record("end", self.task_id)


class Poison(Task):
    app = app
    queue = "work"
    time_limit = 80
    max_retries = 1

    async def run_task(self, neighbours):
        record("start", self.task_id)
        for _ in range(2000):  # kills its process once its neighbours run beside it
            if len(STARTED) >= neighbours or not first_run():
                break
            await asyncio.sleep(0.01)
        os.kill(os.getpid(), 9)


class Forker(Task):
    # forks, and returns in both processes after an await

    app = app
    queue = "work"
    max_retries = 0

    async def run_task(self, neighbours):
        for _ in range(2000):
            if len(STARTED) >= neighbours:
                break
            await asyncio.sleep(0.01)
        pid = os.fork()
        await asyncio.sleep(0.2)
        record("forked-end" if pid == 0 else "end", self.task_id)
        if pid:
            os.waitpid(pid, 0)


class Stuck(Task):
    app = app
    queue = "work"
    time_limit = 0.5
    max_retries = 0

    async def run_task(self, neighbours):
        record("start", self.task_id)
        for _ in range(2000):
            if len(STARTED) >= neighbours:
                break
            await asyncio.sleep(0.01)
        time.sleep(60)  # blocks the event loop: only the supervisor can end it
"""

DEADLINE = 45.0  # under the tests' 60 s timeout, so that a stuck run says where it is


def on_engine(request: pytest.FixtureRequest, workspace: Workspace) -> Workspace:
    if request.param == "redis":
        workspace.url = request.getfixturevalue("redis_server_factory")().url
    elif request.param == "sqs":
        workspace.url = request.getfixturevalue("sqs_fresh_url")
    return workspace


@pytest.fixture(params=["sqlite", "redis", "sqs"])
def ws(request: pytest.FixtureRequest, workspace: Workspace) -> Workspace:
    return on_engine(request, workspace)


@pytest.fixture(params=["sqlite", "redis"])
def recovering(request: pytest.FixtureRequest, workspace: Workspace) -> Workspace:
    """The engines whose supervisor gives back a dead process's jobs (not SQS: there they
    come back when their locks run out, a retry spent; docs/reliability.md)."""
    return on_engine(request, workspace)


def peak_at_once(lines: Sequence[Line], jids: Sequence[str]) -> int:
    """The most of `jids` that one process ran at the same time."""
    events = sorted(
        (line.when, 1 if line.what == "start" else -1, line.pid)
        for line in lines
        if line.jid in jids
    )
    running: dict[int, int] = {}
    peak = 0
    for _, step, pid in events:
        running[pid] = running.get(pid, 0) + step
        peak = max(peak, running[pid])
    return peak


def unsettled_history(ws: Workspace, jids: Sequence[str]) -> str:
    return "\n".join(
        f"{jid}: "
        + ", ".join(f"{e.what}@{e.when:.2f}{dict(e.details)}" for e in ws.job(jid).history)
        for jid in jids
        if ws.job(jid).state not in (JobState.COMPLETE, JobState.FAILED)
    )


def settle(ws: Workspace, pool_step: Callable[[], None], jids: Sequence[str], what: str) -> None:
    """Wait until every job is complete or failed (on SQS, which cannot look a job up:
    until each one's task ended)."""
    if ws.url.startswith("sqs"):
        done = lambda: {line.jid for line in ws.lines("end")} >= set(jids)  # noqa: E731
        details = ws.log
    else:
        settled = (JobState.COMPLETE, JobState.FAILED)
        done = lambda: all(ws.job(jid).state in settled for jid in jids)  # noqa: E731
        details = lambda: states(ws, jids) + "\n" + unsettled_history(ws, jids)  # noqa: E731
    wait_until(done, DEADLINE, what, step=pool_step, details=details)


def failed_in(ws: Workspace, jid: str) -> str | None:
    """The failure group of a failed job (None if it did not fail)."""
    job = ws.job(jid)
    return job.failure.group if job.state == JobState.FAILED and job.failure else None


def assert_uncharged(ws: Workspace, jids: Sequence[str]) -> None:
    for jid in jids:
        job = ws.job(jid)
        assert job.state == JobState.COMPLETE, states(ws, jids)
        assert job.remaining == job.retries, f"{jid} was charged a retry"


def test_async_and_threaded_jobs_run_side_by_side(ws: Workspace) -> None:
    tasks = ws.write_module(TASKS, queues=QUEUES)
    naps = [tasks.Nap.publish(None, 0.5) for _ in range(30)]
    dozes = [tasks.Doze.publish(None, 0.5) for _ in range(6)]

    with running_pool(tasks.app, concurrency=2, tasks_per_process=20, threads=3) as pool:
        settle(ws, supervising(pool), naps + dozes, "every job to settle")

    lines = ws.lines()
    assert peak_at_once(lines, naps) >= 2
    assert peak_at_once(lines, dozes) >= 2
    ended = [line.jid for line in ws.lines("end")]
    assert set(ended) == {handle.jid for handle in naps + dozes}
    if ws.url.startswith("sqs"):
        # SQS keeps no history, and may hand a message out twice (at least once).
        assert len(ended) <= len(naps + dozes) + 2
    else:
        assert len(ended) == len(naps + dozes)
        assert all_complete(ws, naps + dozes), states(ws, naps + dozes)
        assert {done_count(ws, jid) for jid in naps + dozes} == {1}


def test_kill_9_of_a_process_holding_50_jobs_gives_them_all_back_uncharged(
    recovering: Workspace,
) -> None:
    ws = recovering
    tasks = ws.write_module(TASKS, queues=QUEUES)
    naps = [tasks.Nap.publish(None, 60) for _ in range(50)]

    with running_pool(tasks.app, concurrency=1, tasks_per_process=50) as pool:
        wait_until(lambda: len(ws.lines("start")) >= 50, DEADLINE, "50 jobs to start",
                   step=supervising(pool), details=ws.log)  # fmt: skip
        [victim] = {line.pid for line in ws.lines("start")}
        os.kill(victim, signal.SIGKILL)
        settle(ws, supervising(pool), naps, "the 50 jobs to run again")

    for jid in naps:
        job = ws.job(jid)
        assert job.state == JobState.COMPLETE, states(ws, naps)
        assert job.remaining == job.retries, f"{jid} was charged a retry"
        assert [event.what for event in job.history].count("worker-died") == 1
        assert len(ws.lines("end", jid)) == 1
    assert victim not in {line.pid for line in ws.lines("end")}


def test_a_poison_job_fails_alone_and_its_neighbours_never_do(recovering: Workspace) -> None:
    ws = recovering
    tasks = ws.write_module(TASKS, queues=QUEUES)
    innocents = [tasks.Nap.publish(None, 60) for _ in range(10)]
    poison = tasks.Poison.publish(None, 10)

    with running_pool(tasks.app, concurrency=2, tasks_per_process=20) as pool:
        settle(ws, supervising(pool), [*innocents, poison], "every job to settle")

    assert failed_in(ws, poison) == "lanner-worker-died"
    assert_uncharged(ws, innocents)


def test_a_job_stuck_past_its_limit_is_charged_alone(recovering: Workspace) -> None:
    ws = recovering
    tasks = ws.write_module(TASKS, queues=QUEUES)  # a grace of 0.5 s
    innocents = [tasks.Nap.publish(None, 60) for _ in range(10)]
    stuck = tasks.Stuck.publish(None, 10)

    with running_pool(tasks.app, concurrency=1, tasks_per_process=20) as pool:
        settle(ws, supervising(pool), [*innocents, stuck], "every job to settle")

    assert failed_in(ws, stuck) == "TimeLimitExceeded"
    assert "past its time limit" in str(ws.job(stuck).failure)
    assert_uncharged(ws, innocents)
    for jid in innocents:  # the culprit was known: no death to run alone after
        assert "worker-died" not in [event.what for event in ws.job(jid).history]


def test_a_warm_shutdown_finishes_every_job_in_flight(ws: Workspace) -> None:
    tasks = ws.write_module(TASKS, queues=QUEUES)
    naps = [tasks.Nap.publish(None, 1.0) for _ in range(20)]

    with running_pool(tasks.app, concurrency=1, tasks_per_process=20) as pool:
        wait_until(lambda: len(ws.lines("start")) >= 20, DEADLINE, "20 jobs to start",
                   step=supervising(pool), details=ws.log)  # fmt: skip
        pool.terminate(timeout=30)

    assert len(ws.lines("end")) == 20
    if not ws.url.startswith("sqs"):
        assert all_complete(ws, naps), states(ws, naps)


def test_sync_jobs_waiting_for_a_thread_go_to_a_process_with_one(ws: Workspace) -> None:
    tasks = ws.write_module(TASKS, queues=QUEUES)
    dozes = [tasks.Doze.publish(None, 1.0) for _ in range(4)]

    with running_pool(tasks.app, concurrency=2, tasks_per_process=5, threads=1) as pool:
        settle(ws, supervising(pool), dozes, "the sync jobs to end")

    lines = ws.lines()
    assert len({line.pid for line in lines if line.what == "start"}) == 2, "one process hoarded"
    assert peak_at_once(lines, dozes) == 1  # one thread each: never two at once in a process


def test_a_copy_forked_by_a_task_runs_no_other_job(recovering: Workspace) -> None:
    ws = recovering
    tasks = ws.write_module(TASKS, queues=QUEUES)
    neighbours = [tasks.Nap.publish(None, 0.5) for _ in range(5)]
    forker = tasks.Forker.publish(None, 5)

    with running_pool(tasks.app, concurrency=1, tasks_per_process=10) as pool:
        settle(ws, supervising(pool), [*neighbours, forker], "every job to settle")

    assert_uncharged(ws, neighbours)
    assert ws.job(forker).state == JobState.COMPLETE
    pids = {line.pid for line in ws.lines("start")}
    assert len(pids) == 1
    for jid in neighbours:  # each ended once, in the worker, never in the forked copy
        assert [line.pid for line in ws.lines("end", jid)] == list(pids)
    assert {line.pid for line in ws.lines("end", forker)} == pids


def test_lanner_cancel_stops_that_job_alone(recovering: Workspace) -> None:
    ws = recovering
    tasks = ws.write_module(TASKS, queues=QUEUES)
    victim = tasks.Nap.publish(None, 60)
    neighbours = [tasks.Nap.publish(None, 2.0) for _ in range(5)]

    with running_pool(tasks.app, concurrency=1, tasks_per_process=10) as pool:
        wait_until(lambda: len(ws.lines("start")) >= 6, DEADLINE, "the jobs to start",
                   step=supervising(pool), details=ws.log)  # fmt: skip
        [worker] = pool.children
        assert ws.engine.cancel([victim]) == [victim]
        settle(ws, supervising(pool), neighbours, "the neighbours to end")
        wait_until(lambda: pool.counts().running == 0, DEADLINE, "the victim's task to stop",
                   step=supervising(pool))  # fmt: skip
        assert pool.children == [worker], "the process was killed, not the one job stopped"

    assert_uncharged(ws, neighbours)
    assert ws.engine.get(victim) is None
    assert ws.lines("end", victim) == []

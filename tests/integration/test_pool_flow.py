"""FLOW with a real pool: `max_concurrency` per key holds across processes and kill -9.

Runs of one key never overlap (a killed run ends at its kill), and every job completes
once, on SQLite and on Redis Cluster (the session's 3 primaries, where each key lives in
its queue's partition); two pools fire each tick of a schedule once on both. Publishing
goes through the task's declared `concurrency_key`, so the decorator and Kale-style class
attributes are what is tested, not only the engine.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from itertools import pairwise

import pytest

from .conftest import Workspace, wait_until
from .pool_support import all_complete, done_count, running_pool, states, supervising

KEYED = """
@app.task(queue="work", max_retries=5, concurrency_key=lambda key, n: key, max_concurrency=1)
def keyed(key, n):
    record("start:" + key, current_job_id())
    time.sleep(0.05)
    record("end:" + key, current_job_id())


class Limited(Task):
    app = app
    queue = "work"
    max_retries = 5
    time_limit = 4
    concurrency_key = "shared"
    max_concurrency = 1

    def run_task(self, n):
        record("start:shared", self.task_id)
        time.sleep(0.05)
        record("end:shared", self.task_id)


def current_job_id():
    from lanner import current_job

    return current_job().jid
"""


@pytest.fixture(params=["sqlite", "redis-cluster"])
def ws(request: pytest.FixtureRequest, workspace: Workspace) -> Workspace:
    """The workspace on SQLite, or on the session's Redis Cluster, emptied."""
    if request.param == "redis-cluster":
        cluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        workspace.url = cluster.url
    return workspace


KEYS = ("a", "b", "c")
PER_KEY = 5
KILLS = 2


def test_no_two_runs_of_one_key_overlap_through_kill_9(ws: Workspace) -> None:
    queues = 'QueueConfig("work", batch_size=2, visibility_timeout_sec=10, long_poll_time_sec=0.2)'
    tasks = ws.write_module(KEYED, queues=queues)
    jids = [tasks.keyed.delay(key, n) for n in range(PER_KEY) for key in KEYS]
    jids += [tasks.Limited.publish(None, n) for n in range(PER_KEY)]
    killed: dict[int, float] = {}

    with running_pool(tasks.app, concurrency=3) as pool:
        for _ in range(KILLS):
            started = wait_until(
                lambda: [
                    line
                    for line in ws.lines()
                    if line.what.startswith("start:")
                    and line.pid not in killed
                    and line.pid in pool.children
                ],
                20,
                "a run to kill",
                step=supervising(pool),
            )
            victim = started[-1].pid
            os.kill(victim, signal.SIGKILL)
            killed[victim] = time.time()
        wait_until(
            lambda: all_complete(ws, jids),
            60,
            "every job to complete",
            step=supervising(pool),
            details=lambda: states(ws, jids) + "\n" + ws.log(),
        )

    for jid in jids:
        assert done_count(ws, jid) == 1, jid
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    open_runs: dict[tuple[str, int, str], float] = {}
    for line in ws.lines():
        kind, key = line.what.split(":")
        if kind == "start":
            open_runs[(key, line.pid, line.jid)] = line.when
        else:
            runs[key].append((open_runs.pop((key, line.pid, line.jid)), line.when))
    for (key, pid, _), start in open_runs.items():  # runs a kill ended
        runs[key].append((start, killed[pid]))
    for key, spans in runs.items():
        spans.sort()
        for (_, end), (start, _) in pairwise(spans):
            assert start >= end, f"two runs of key {key} overlapped"


TICKING = """
@app.periodic(every=1)
@app.task(queue="work", name="ticking.tick", max_retries=0)
def tick():
    from lanner import current_job

    record("tick", current_job().jid)
"""


def test_two_pools_run_each_tick_of_a_schedule_once(ws: Workspace) -> None:
    tasks = ws.write_module(TICKING)
    with (
        running_pool(tasks.app, concurrency=1) as first,
        running_pool(tasks.app, concurrency=1) as second,
    ):

        def both() -> None:
            first.supervise(0.05)
            second.supervise(0.05)

        wait_until(lambda: len(ws.lines("tick")) >= 3, 30, "three ticks", step=both)
    ran = [line.jid for line in ws.lines("tick")]
    assert len(ran) == len(set(ran)), "a tick ran twice"
    assert all(jid.startswith("periodic-ticking.tick@") for jid in ran)

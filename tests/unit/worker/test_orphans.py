"""A new pool settles the jobs of its host's workers that died with their supervisor."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import lanner
from lanner import Engine, JobState
from lanner.worker.processes import process_alive
from lanner.worker.recovery import DEATH_ENTRY, orphans_of_host

HOST = "box"
DEAD, ALIVE = f"{HOST}-111", f"{HOST}-222"


@pytest.fixture(params=["sqlite", "redis"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'lanner.db'}"
    else:
        import redis

        url = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
    with lanner.open_engine(url) as opened:
        yield opened


def held(engine: Engine, jid: str, worker: str, retries: int) -> None:
    engine.put("q", jid, "t.Task", retries=retries)
    [job] = engine.pop("q", worker)
    assert job.jid == jid


def settle(engine: Engine) -> None:
    chore = orphans_of_host(HOST, lambda pid: pid == 222, lambda n: 30.0 * 2**n)
    chore(engine)


def test_a_dead_workers_job_comes_back_at_once_a_retry_spent(engine: Engine) -> None:
    held(engine, "a", DEAD, retries=2)
    settle(engine)
    job = engine.get("a")
    assert job is not None
    assert (job.state, job.remaining, job.worker) == (JobState.WAITING, 1, "")
    assert DEATH_ENTRY in [event.what for event in job.history]


def test_a_dead_workers_job_with_no_retry_left_fails_with_the_reason(engine: Engine) -> None:
    held(engine, "b", DEAD, retries=0)
    settle(engine)
    job = engine.get("b")
    assert job is not None
    assert job.failure is not None
    assert (job.state, job.failure.group) == (JobState.FAILED, "lanner-worker-died")
    assert "supervisor had died" in job.failure.message


def test_a_second_death_waits_its_backoff(engine: Engine) -> None:
    held(engine, "c", DEAD, retries=3)
    settle(engine)
    [popped] = engine.pop("q", f"{HOST}-333")
    settle(engine)  # 333 is dead too
    job = engine.get(popped.jid)
    assert job is not None
    assert job.state == JobState.SCHEDULED


def test_live_workers_and_other_hosts_keep_their_jobs(engine: Engine) -> None:
    held(engine, "d", ALIVE, retries=2)
    held(engine, "e", "elsewhere-111", retries=2)
    settle(engine)
    for jid, worker in (("d", ALIVE), ("e", "elsewhere-111")):
        job = engine.get(jid)
        assert job is not None
        assert (job.state, job.worker) == (JobState.RUNNING, worker)


def test_process_alive_tells_a_reaped_process_from_a_live_one() -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    assert process_alive(os.getpid())
    assert not process_alive(done.pid)


def test_a_dead_workers_finished_workflow_step_runs_again_for_its_result(engine: Engine) -> None:
    from lanner.worker.recovery import DeadWorker, recovery

    step = '{"v":1,"args":[],"kwargs":{},"app_data":null,"wf":{"id":"w"}}'
    engine.put("q", "plain", "t.Task", retries=2)
    engine.put("q", "step", "t.Task", step, retries=2)
    assert len(engine.pop("q", DEAD, 2)) == 2
    dead = DeadWorker(DEAD, (), (), (("q", "plain"), ("q", "step")), "killed", None, False)

    recovery(dead, lambda n: 1.0)(engine)

    plain, again = engine.get("plain"), engine.get("step")
    assert plain is not None
    assert again is not None
    assert plain.state == JobState.COMPLETE
    assert (again.state, again.remaining) == (JobState.WAITING, 2)  # no retry spent


def test_a_pool_leaves_its_own_dead_children_to_itself(tmp_path: Path) -> None:
    # The chore put off by an outage at start runs after a child of this pool died: that
    # child's jobs are the pool's to settle (it knows what each had done), not orphans.
    app = lanner.App(f"sqlite:///{tmp_path / 'lanner.db'}")
    gone = subprocess.Popen(["true"])
    gone.wait()
    worker = f"{socket.gethostname()}-{gone.pid}"
    held(app.engine, "ours", worker, retries=2)
    pool = lanner.WorkerPool(app, concurrency=1)
    assert pool._forked is not None
    pool._forked.add(gone.pid)  # as _spawn records each child it forks
    pool._settle_orphans(app.engine)
    job = app.engine.get("ours")
    assert job is not None
    assert (job.state, job.worker) == (JobState.RUNNING, worker)
    assert pool._forked is None  # settled: the pool no longer tracks what it forks

    # An earlier pool's dead child is an orphan.
    other = lanner.WorkerPool(app, concurrency=1)
    other._settle_orphans(app.engine)
    job = app.engine.get("ours")
    assert job is not None
    assert (job.state, job.worker) == (JobState.WAITING, "")

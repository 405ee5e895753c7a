"""Optional capabilities: tracking, workers, queue-forget (recurring: test_recurring.py).

Each test skips on engines without the capability.
"""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobNotFound

from .helpers import HEARTBEAT, T0, get, in_state, jids, require, running

# -- tracking -----------------------------------------------------------------------------


def test_track_marks_a_job_tracked(engine: Engine) -> None:
    require(engine, Capability.TRACKING)
    in_state(engine, "waiting", "j1")
    engine.track("j1", now=T0)
    assert get(engine, "j1").tracked is True
    assert jids(engine.tracked(now=T0)) == ["j1"]


def test_untrack_unmarks_it(engine: Engine) -> None:
    require(engine, Capability.TRACKING)
    in_state(engine, "waiting", "j1")
    engine.track("j1", now=T0)
    engine.untrack("j1", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).tracked is False
    assert engine.tracked(now=T0 + 1) == []


def test_tracking_a_missing_job_is_an_error(engine: Engine) -> None:
    require(engine, Capability.TRACKING)
    with pytest.raises(JobNotFound):
        engine.track("nope", now=T0)


def test_tracking_survives_a_move(engine: Engine) -> None:
    require(engine, Capability.TRACKING)
    in_state(engine, "waiting", "j1")
    engine.track("j1", now=T0)
    engine.put("other", "j1", "Task", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).tracked is True


# -- workers ------------------------------------------------------------------------------


def test_workers_lists_who_holds_jobs(engine: Engine) -> None:
    require(engine, Capability.WORKERS)
    in_state(engine, "running", "j1")
    (worker,) = [w for w in engine.workers(now=T0) if w.name == "w1"]
    assert (worker.jobs, worker.stalled) == (1, 0)
    assert engine.worker_jobs("w1", now=T0).jobs == ("j1",)


def test_worker_deregister_forgets_the_worker(engine: Engine) -> None:
    require(engine, Capability.WORKERS)
    in_state(engine, "running", "j1")
    engine.worker_deregister(["w1"], now=T0 + 1)
    assert "w1" not in [w.name for w in engine.workers(now=T0 + 1)]


def test_a_worker_whose_lock_ran_out_shows_the_job_as_stalled(engine: Engine) -> None:
    require(engine, Capability.WORKERS)
    running(engine, "j1", worker="w1")
    later = T0 + HEARTBEAT + 1
    (worker,) = [w for w in engine.workers(now=later) if w.name == "w1"]
    assert (worker.jobs, worker.stalled) == (0, 1)
    assert engine.worker_jobs("w1", now=later).stalled == ("j1",)


def test_workers_are_listed_most_recently_seen_first(engine: Engine) -> None:
    require(engine, Capability.WORKERS)
    engine.pop("q", "early", now=T0)
    engine.pop("q", "late", now=T0 + 5)
    assert [w.name for w in engine.workers(now=T0 + 6)] == ["late", "early"]


def test_idle_workers_are_forgotten_after_max_worker_age(engine: Engine) -> None:
    require(engine, Capability.WORKERS)
    engine.config_set("max-worker-age", 100, now=T0)
    engine.pop("q", "idle", now=T0)
    engine.pop("q", "busy", now=T0 + 150)
    assert [w.name for w in engine.workers(now=T0 + 150)] == ["busy"]


def test_a_completed_job_leaves_its_worker(engine: Engine) -> None:
    require(engine, Capability.WORKERS)
    running(engine, "j1", worker="w1")
    engine.complete("j1", "w1", "q", now=T0 + 1)
    assert engine.worker_jobs("w1", now=T0 + 1).jobs == ()


# -- queue-forget -------------------------------------------------------------------------


def test_queue_forget_drops_an_empty_queue_from_the_list(engine: Engine) -> None:
    require(engine, Capability.QUEUE_FORGET)
    in_state(engine, "complete", "j1", "old")
    engine.put("kept", "j2", "Task", now=T0)
    engine.queue_forget(["old"], now=T0 + 1)
    assert [q.name for q in engine.queues(now=T0 + 1)] == ["kept"]


def test_queue_forget_keeps_the_jobs_and_a_put_brings_the_queue_back(engine: Engine) -> None:
    require(engine, Capability.QUEUE_FORGET)
    engine.put("old", "j1", "Task", now=T0)
    engine.queue_forget(["old"], now=T0 + 1)
    assert get(engine, "j1", T0 + 1).queue == "old"
    engine.put("old", "j2", "Task", now=T0 + 2)
    assert [q.name for q in engine.queues(now=T0 + 2)] == ["old"]
    assert engine.queue_counts("old", now=T0 + 2).waiting == 2

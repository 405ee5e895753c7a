"""Optional capabilities no engine has yet: tracking, workers, recurring, queue-forget.

These skip on engines without the capability; they pin the obvious parts of
docs/protocol.md so that the Redis engine meets them when it arrives.
"""

from __future__ import annotations

from lanner import Capability, Engine

from .helpers import T0, get, in_state, jids, pop_jids, require

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


# -- recurring ----------------------------------------------------------------------------


def test_recurring_job_spawns_jobs_named_after_it(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    engine.recur("q", "rec", "Task", '{"n": 1}', 60.0, now=T0)

    (job,) = engine.pop("q", "w1", now=T0)

    assert job.jid == "rec-1"
    assert job.spawned_from_jid == "rec"
    assert job.decoded_data() == {"n": 1}
    assert pop_jids(engine, "q", now=T0 + 59) == []
    assert pop_jids(engine, "q", now=T0 + 60) == ["rec-2"]


def test_recur_get_and_unrecur(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    engine.recur("q", "rec", "Task", "{}", 60.0, now=T0)
    template = engine.recur_get("rec", now=T0)
    assert template is not None
    assert (template.queue, template.klass, template.interval) == ("q", "Task", 60.0)
    engine.unrecur("rec", now=T0)
    assert engine.recur_get("rec", now=T0) is None


# -- queue-forget -------------------------------------------------------------------------


def test_queue_forget_drops_an_empty_queue_from_the_list(engine: Engine) -> None:
    require(engine, Capability.QUEUE_FORGET)
    in_state(engine, "complete", "j1", "old")
    engine.put("kept", "j2", "Task", now=T0)
    engine.queue_forget(["old"], now=T0 + 1)
    assert [q.name for q in engine.queues(now=T0 + 1)] == ["kept"]

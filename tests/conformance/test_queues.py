"""queues, queue_counts, length, jobs listings, pause/unpause and max-concurrency."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, MalformedArgument, QueueCounts

from .helpers import HEARTBEAT, T0, in_state, pop_jids, put_all, require, running


def counts(
    name: str,
    waiting: int = 0,
    stalled: int = 0,
    running: int = 0,
    scheduled: int = 0,
    depends: int = 0,
    paused: bool = False,
) -> QueueCounts:
    return QueueCounts(name, waiting, stalled, running, scheduled, depends, 0, paused)


# -- queues / queue_counts / length ----------------------------------------------------


def test_a_fresh_store_knows_no_queues(engine: Engine) -> None:
    assert engine.queues(now=T0) == []


def test_queues_lists_every_queue_seen_by_name(engine: Engine) -> None:
    for queue in ["zeta", "alpha", "Mid", "beta"]:
        engine.put(queue, f"j-{queue}", "Task", now=T0)
    names = [q.name for q in engine.queues(now=T0)]
    assert names == sorted(names)
    assert set(names) == {"zeta", "alpha", "Mid", "beta"}


def test_queues_gives_each_queues_counts(engine: Engine) -> None:
    put_all(engine, "a", ["a1", "a2", "a3"])
    engine.put("b", "b1", "Task", now=T0)
    pop_jids(engine, "a")

    assert engine.queues(now=T0) == [counts("a", waiting=2, running=1), counts("b", waiting=1)]


def test_queue_counts_gives_one_queue(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b"])
    pop_jids(engine, "q")
    assert engine.queue_counts("q", now=T0) == counts("q", waiting=1, running=1)


def test_queue_stays_known_after_its_jobs_are_done(engine: Engine) -> None:
    in_state(engine, "complete", "j1")
    assert engine.queues(now=T0 + 1) == [counts("q")]


def test_counts_do_not_include_failed_or_complete_jobs(engine: Engine) -> None:
    in_state(engine, "failed", "f")
    in_state(engine, "complete", "c")
    assert engine.queue_counts("q", now=T0) == counts("q")


@pytest.mark.driven_clock
def test_counts_report_an_expired_lock_as_stalled(engine: Engine) -> None:
    running(engine, "j1")
    engine.put("q", "j2", "Task", now=T0)
    assert engine.queue_counts("q", now=T0 + HEARTBEAT) == counts("q", waiting=1, stalled=1)


def test_counts_scheduled_jobs(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert engine.queue_counts("q", now=T0 + 5) == counts("q", scheduled=1)


@pytest.mark.driven_clock
def test_a_due_scheduled_job_counts_as_waiting(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert engine.queue_counts("q", now=T0 + 10) == counts("q", waiting=1)
    assert engine.queues(now=T0 + 10) == [counts("q", waiting=1)]


def test_counts_jobs_waiting_on_dependencies(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)
    assert engine.queue_counts("q", now=T0) == counts("q", waiting=1, depends=1)


def test_length_is_running_plus_waiting(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b", "c"])
    pop_jids(engine, "q")
    assert engine.length("q", now=T0) == 3


def test_length_includes_stalled_jobs(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.length("q", now=T0 + HEARTBEAT + 1) == 1


def test_length_includes_scheduled_jobs(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "a", "Task", delay=10, now=T0)
    engine.put("q", "b", "Task", now=T0)
    assert engine.length("q", now=T0) == 2
    assert engine.length("q", now=T0 + 10) == 2


def test_length_excludes_depends_failed_and_complete(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)
    in_state(engine, "failed", "f", "other")
    assert engine.length("q", now=T0) == 1


def test_length_of_an_unknown_queue_is_zero(engine: Engine) -> None:
    assert engine.length("nothing", now=T0) == 0


# -- jobs listings ------------------------------------------------------------------------


@pytest.mark.requires(Capability.LISTING)
def test_jobs_waiting_lists_in_pop_order(engine: Engine) -> None:
    put_all(engine, "q", ["m", "c", "x"])
    assert engine.jobs("waiting", "q", now=T0) == ["m", "c", "x"]


def test_jobs_waiting_follows_priority(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q", "low", "Task", now=T0)
    engine.put("q", "high", "Task", priority=3, now=T0)
    assert engine.jobs("waiting", "q", now=T0) == ["high", "low"]


@pytest.mark.requires(Capability.LISTING)
def test_jobs_running_lists_locked_jobs(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b", "c"])
    pop_jids(engine, "q", count=2)
    assert sorted(engine.jobs("running", "q", now=T0)) == ["a", "b"]
    assert engine.jobs("waiting", "q", now=T0) == ["c"]


@pytest.mark.requires(Capability.LISTING)
def test_jobs_scheduled_lists_soonest_first(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "late", "Task", delay=30, now=T0)
    engine.put("q", "soon", "Task", delay=10, now=T0)
    engine.put("q", "mid", "Task", delay=20, now=T0)
    assert engine.jobs("scheduled", "q", now=T0) == ["soon", "mid", "late"]


@pytest.mark.requires(Capability.LISTING)
def test_jobs_lists_a_due_scheduled_job_as_waiting(engine: Engine) -> None:
    """The listings agree with the counts and with pop order once a delay has passed."""
    require(engine, Capability.DELAY)
    engine.put("q", "due", "Task", delay=10, now=T0)
    engine.put("q", "later", "Task", delay=50, now=T0)
    engine.put("q", "plain", "Task", now=T0 + 5)

    assert engine.queue_counts("q", now=T0 + 10) == counts("q", waiting=2, scheduled=1)
    assert engine.jobs("waiting", "q", now=T0 + 10) == ["plain", "due"]
    assert engine.jobs("scheduled", "q", now=T0 + 10) == ["later"]


def test_jobs_depends_lists_jobs_waiting_on_others(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)
    assert engine.jobs("depends", "q", now=T0) == ["child"]
    assert engine.jobs("waiting", "q", now=T0) == ["parent"]


@pytest.mark.requires(Capability.LISTING)
def test_jobs_lists_only_the_queue_asked(engine: Engine) -> None:
    put_all(engine, "a", ["a1"])
    put_all(engine, "b", ["b1"])
    assert engine.jobs("waiting", "b", now=T0) == ["b1"]


@pytest.mark.requires(Capability.LISTING)
def test_jobs_pages_with_offset_and_count(engine: Engine) -> None:
    names = [f"j{i:02d}" for i in range(30)]
    put_all(engine, "q", names)
    assert engine.jobs("waiting", "q", now=T0) == names[:25]
    assert engine.jobs("waiting", "q", 25, now=T0) == names[25:]
    assert engine.jobs("waiting", "q", 3, 4, now=T0) == names[3:7]
    assert engine.jobs("waiting", "q", 40, 5, now=T0) == []


def test_jobs_of_an_unknown_state_is_malformed(engine: Engine) -> None:
    with pytest.raises(MalformedArgument, match="state"):
        engine.jobs("bogus", "q", now=T0)


# -- pause / unpause ----------------------------------------------------------------------


def test_paused_queue_gives_nothing(engine: Engine) -> None:
    require(engine, Capability.PAUSE)
    put_all(engine, "q", ["a"])
    engine.pause(["q"], now=T0)
    assert pop_jids(engine, "q", count=5) == []
    assert engine.queue_counts("q", now=T0) == counts("q", waiting=1, paused=True)


def test_paused_queue_can_still_be_peeked(engine: Engine) -> None:
    require(engine, Capability.PAUSE)
    put_all(engine, "q", ["a"])
    engine.pause(["q"], now=T0)
    assert [j.jid for j in engine.peek("q", now=T0)] == ["a"]


def test_unpaused_queue_gives_jobs_again(engine: Engine) -> None:
    require(engine, Capability.PAUSE)
    put_all(engine, "q", ["a"])
    engine.pause(["q"], now=T0)
    engine.unpause(["q"], now=T0 + 1)
    assert engine.queue_counts("q", now=T0 + 1).paused is False
    assert pop_jids(engine, "q", now=T0 + 1) == ["a"]


def test_pause_affects_only_the_queues_named(engine: Engine) -> None:
    require(engine, Capability.PAUSE)
    put_all(engine, "a", ["a1"])
    put_all(engine, "b", ["b1"])
    put_all(engine, "c", ["c1"])
    engine.pause(["a", "b"], now=T0)
    assert pop_jids(engine, "c") == ["c1"]
    assert pop_jids(engine, "a") == []
    assert pop_jids(engine, "b") == []


def test_paused_queue_still_accepts_puts_and_completions(engine: Engine) -> None:
    require(engine, Capability.PAUSE)
    running(engine, "j1")
    engine.pause(["q"], now=T0)
    engine.put("q", "j2", "Task", now=T0 + 1)
    assert engine.complete("j1", "w1", "q", now=T0 + 1) == "complete"
    assert engine.queue_counts("q", now=T0 + 1).waiting == 1


# -- max-concurrency ----------------------------------------------------------------------


def test_max_concurrency_limits_how_many_jobs_run(engine: Engine) -> None:
    require(engine, Capability.MAX_CONCURRENCY)
    engine.config_set("q-max-concurrency", 2, now=T0)
    put_all(engine, "q", ["a", "b", "c", "d"])

    assert pop_jids(engine, "q", count=5) == ["a", "b"]
    assert pop_jids(engine, "q", "w2", count=5) == []


def test_max_concurrency_frees_a_slot_on_completion(engine: Engine) -> None:
    require(engine, Capability.MAX_CONCURRENCY)
    engine.config_set("q-max-concurrency", 2, now=T0)
    put_all(engine, "q", ["a", "b", "c", "d"])
    pop_jids(engine, "q", count=2)

    engine.complete("a", "w1", "q", now=T0 + 1)
    assert pop_jids(engine, "q", count=5, now=T0 + 1) == ["c"]


def test_lowering_max_concurrency_below_running_gives_nothing(engine: Engine) -> None:
    require(engine, Capability.MAX_CONCURRENCY)
    put_all(engine, "q", ["a", "b", "c", "d", "e"])
    assert pop_jids(engine, "q", count=3) == ["a", "b", "c"]

    engine.config_set("q-max-concurrency", 1, now=T0)
    assert pop_jids(engine, "q", count=5) == []
    engine.complete("a", "w1", "q", now=T0 + 1)
    engine.complete("b", "w1", "q", now=T0 + 1)
    assert pop_jids(engine, "q", count=5, now=T0 + 1) == []
    engine.complete("c", "w1", "q", now=T0 + 2)
    assert pop_jids(engine, "q", count=5, now=T0 + 2) == ["d"]


def test_max_concurrency_is_per_queue(engine: Engine) -> None:
    require(engine, Capability.MAX_CONCURRENCY)
    engine.config_set("a-max-concurrency", 1, now=T0)
    put_all(engine, "a", ["a1", "a2"])
    put_all(engine, "b", ["b1", "b2"])
    assert pop_jids(engine, "a", count=2) == ["a1"]
    assert pop_jids(engine, "b", count=2) == ["b1", "b2"]


def test_unsetting_max_concurrency_removes_the_limit(engine: Engine) -> None:
    require(engine, Capability.MAX_CONCURRENCY)
    engine.config_set("q-max-concurrency", 1, now=T0)
    put_all(engine, "q", ["a", "b", "c"])
    pop_jids(engine, "q")
    engine.config_unset("q-max-concurrency", now=T0)
    assert pop_jids(engine, "q", count=5) == ["b", "c"]


def test_max_concurrency_does_not_count_expired_locks(engine: Engine) -> None:
    """A dead worker's job must still be reclaimed when the queue is at its limit."""
    require(engine, Capability.MAX_CONCURRENCY)
    engine.config_set("grace-period", 0, now=T0)
    engine.config_set("q-max-concurrency", 1, now=T0)
    put_all(engine, "q", ["a", "b"])
    assert pop_jids(engine, "q", "w1") == ["a"]

    assert pop_jids(engine, "q", "w2", count=5, now=T0 + HEARTBEAT) == ["a"]
    assert pop_jids(engine, "q", "w3", count=5, now=T0 + HEARTBEAT) == []

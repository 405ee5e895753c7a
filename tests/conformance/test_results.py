"""Results (capability `results`), waiting for a job (`wait`), unique puts (`unique`), and
when a job is due (`Job.due`, every engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lanner import (
    Capability,
    Engine,
    InvalidState,
    Job,
    JobState,
    MalformedArgument,
    NewJob,
    PayloadTooLarge,
)

from .helpers import T0, completed, failed, get, require, running

NOW = T0 + 1


# -- results ------------------------------------------------------------------------------


def test_a_completed_job_keeps_its_result(engine: Engine) -> None:
    require_results(engine)
    running(engine, "a")
    assert engine.complete("a", "w1", "q", result='{"sum": 3}', now=NOW) == "complete"
    assert get(engine, "a", NOW).result == '{"sum": 3}'


@pytest.mark.requires(Capability.LOOKUP)
def test_a_job_without_a_result_has_none(engine: Engine) -> None:
    completed(engine, "a")
    assert get(engine, "a").result is None
    engine.put("q", "b", "Task", now=T0)
    assert get(engine, "b").result is None


def test_complete_many_keeps_the_results_of_the_jobs_it_completes(engine: Engine) -> None:
    require_results(engine)
    engine.put_many([NewJob("q", jid, "Task") for jid in ("a", "b", "c")], now=T0)
    engine.pop("q", "w1", 3, now=T0)
    engine.timeout(["c"], now=T0)  # c's lock is gone: it is not completed, keeps nothing
    done = engine.complete_many(
        ["a", "b", "c"], "w1", "q", results={"a": "1", "c": '"lost"'}, now=NOW
    )
    assert done == ["a", "b"]
    assert get(engine, "a", NOW).result == "1"
    assert get(engine, "b", NOW).result is None
    assert get(engine, "c", NOW).result is None


def test_a_result_is_forgotten_when_the_job_is_put_again(engine: Engine) -> None:
    require_results(engine)
    running(engine, "a")
    engine.complete("a", "w1", "q", result="1", now=NOW)
    engine.put("q", "a", "Task", now=NOW)
    assert get(engine, "a", NOW).result is None


@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.complete("a", "w1", "q", result="{nope", now=NOW),
        lambda e: e.complete("a", "w1", "q", result="1", next="q2", now=NOW),
        lambda e: e.complete_many(["a"], "w1", "q", results={"a": "NaN"}, now=NOW),
        lambda e: e.complete_many(["a"], "w1", "q", results={"b": "1"}, now=NOW),
        lambda e: e.complete_many(["a"], "w1", "q", results=["a"], now=NOW),
    ],
    ids=["not-json", "with-next", "nan", "not-completed", "not-a-mapping"],
)
def test_bad_results_are_refused_and_nothing_changes(
    engine: Engine, call: Callable[[Engine], object]
) -> None:
    require_results(engine)
    running(engine, "a")
    with pytest.raises(MalformedArgument):
        call(engine)
    assert get(engine, "a", NOW).state == JobState.RUNNING


def test_a_result_too_large_is_refused_by_name_and_its_batch_mates_keep_theirs(
    engine: Engine,
) -> None:
    """Nothing of the call is stored, so the caller still has every result: it completes
    the batch-mates with theirs, and settles the refused job its own way."""
    require_results(engine)
    engine.put_many([NewJob("q", jid, "Task") for jid in ("a", "big", "c")], now=T0)
    engine.pop("q", "w1", 3, now=T0)
    big = '"' + "x" * engine.max_data_bytes + '"'
    small = {"a": "1", "c": '"three"'}
    with pytest.raises(PayloadTooLarge, match=r"the result of big is \d+ bytes"):
        engine.complete_many(["a", "big", "c"], "w1", "q", results={**small, "big": big}, now=NOW)
    assert {get(engine, jid, NOW).state for jid in ("a", "big", "c")} == {JobState.RUNNING}
    assert engine.complete_many(["a", "c"], "w1", "q", results=small, now=NOW) == ["a", "c"]
    assert get(engine, "a", NOW).result == "1"
    assert get(engine, "c", NOW).result == '"three"'
    assert get(engine, "big", NOW).state == JobState.RUNNING


# -- wait ---------------------------------------------------------------------------------


def test_wait_gives_a_finished_job_at_once(engine: Engine) -> None:
    require(engine, Capability.WAIT)
    completed(engine, "done")
    failed(engine, "broken")
    started = time.monotonic()
    assert engine.wait("done", timeout=5).state == JobState.COMPLETE  # type: ignore[union-attr]
    assert engine.wait("broken", timeout=5).state == JobState.FAILED  # type: ignore[union-attr]
    assert time.monotonic() - started < 4


def test_wait_for_no_such_job_is_none(engine: Engine) -> None:
    require(engine, Capability.WAIT)
    assert engine.wait("nope", timeout=0.1) is None


def test_a_wait_that_ends_gives_the_job_as_it_is(engine: Engine) -> None:
    require(engine, Capability.WAIT)
    engine.put("q", "a", "Task")
    job = engine.wait("a", timeout=0.2)
    assert job is not None
    assert job.state == JobState.WAITING


@pytest.mark.parametrize("ending", ["complete", "fail", "cancel"])
def test_wait_returns_when_another_connection_finishes_the_job(
    engine: Engine, connect: Callable[[], Engine], ending: str
) -> None:
    require(engine, Capability.WAIT)
    engine.put("q", "a", "Task")
    engine.pop("q", "w1")
    other = connect()
    results: list[Job | None] = []
    waiter = threading.Thread(target=lambda: results.append(engine.wait("a", timeout=20)))
    waiter.start()
    time.sleep(0.1)  # the waiter is (very likely) blocked; if not, it finds the end at once
    started = time.monotonic()
    if ending == "complete":
        other.complete("a", "w1", "q")
    elif ending == "fail":
        other.fail("a", "w1", "group", "message")
    else:
        other.cancel(["a"])
    waiter.join(10)
    assert not waiter.is_alive()
    assert time.monotonic() - started < 5  # woken, not timed out
    [found] = results
    if ending == "cancel":
        assert found is None
    else:
        assert found is not None
        assert found.state == (JobState.COMPLETE if ending == "complete" else JobState.FAILED)


# -- unique puts --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["waiting", "scheduled", "depends", "running"])
def test_a_unique_put_keeps_a_live_job_as_it_is(engine: Engine, state: str) -> None:
    require(engine, Capability.UNIQUE)
    if state == "running":
        running(engine, "a")
    elif state == "depends":
        require(engine, Capability.DEPENDENCIES)
        engine.put("q", "dep", "Task", now=T0)
        engine.put("q", "a", "Task", '{"n": 1}', depends=["dep"], now=T0)
    else:
        engine.put("q", "a", "Task", '{"n": 1}', delay=60 if state == "scheduled" else 0, now=T0)
    before = get(engine, "a", NOW)
    assert engine.put("q2", "a", "Other", '{"n": 2}', if_exists="keep", now=NOW) == "a"
    assert get(engine, "a", NOW) == before


@pytest.mark.parametrize("state", ["complete", "failed"])
def test_a_unique_put_of_a_finished_job_runs_it_again(engine: Engine, state: str) -> None:
    require(engine, Capability.UNIQUE)
    (completed if state == "complete" else failed)(engine, "a")
    engine.put("q", "a", "Task", '{"n": 2}', if_exists="keep", now=NOW)
    job = get(engine, "a", NOW)
    assert job.state == JobState.WAITING
    assert job.data == '{"n": 2}'


def test_a_unique_put_many_stores_only_the_absent_jobs(engine: Engine) -> None:
    require(engine, Capability.UNIQUE)
    running(engine, "a")
    put = engine.put_many(
        [NewJob("q", "a", "Task", if_exists="keep"), NewJob("q", "b", "Task", if_exists="keep")],
        now=NOW,
    )
    assert put == ["a", "b"]
    assert get(engine, "a", NOW).state == JobState.RUNNING
    assert get(engine, "b", NOW).state == JobState.WAITING


def test_a_running_job_is_not_moved_when_the_put_says_so(engine: Engine) -> None:
    require(engine, Capability.UNIQUE)
    running(engine, "a")
    before = get(engine, "a", NOW)
    with pytest.raises(InvalidState, match="running"):
        engine.put("q", "a", "Task", '{"n": 2}', if_exists="move-unless-running", now=NOW)
    assert get(engine, "a", NOW) == before
    engine.put("q", "w", "Task", now=T0)
    engine.put("q", "w", "Task", '{"n": 2}', if_exists="move-unless-running", now=NOW)
    assert get(engine, "w", NOW).data == '{"n": 2}'  # a waiting one is moved


def test_an_unknown_if_exists_is_malformed(engine: Engine) -> None:
    with pytest.raises(MalformedArgument, match="if_exists"):
        engine.put("q", "a", "Task", if_exists="merge", now=T0)


# -- due ----------------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_a_job_says_when_it_is_due(engine: Engine) -> None:
    engine.put("q", "now", "Task", now=T0)
    engine.put("q", "later", "Task", delay=30, now=T0)
    assert get(engine, "now").due == T0
    assert get(engine, "later").due == T0 + 30
    running(engine, "busy", queue="q2")
    assert get(engine, "busy").due is None


def require_results(engine: Engine) -> None:
    require(engine, Capability.RESULTS)


# -- outcomes -----------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP, Capability.RESULTS)
def test_outcomes_give_state_result_and_failure_in_the_order_asked(engine: Engine) -> None:
    running(engine, "done")
    engine.complete("done", "w1", "q", result='{"n":1}', now=NOW)
    failed(engine, "broke", now=NOW)
    engine.put("q", "waits", "Task", now=NOW)

    found = engine.outcomes(["waits", "ghost", "broke", "done", "done"], now=NOW)

    assert [(o.jid, o.state) for o in found] == [
        ("waits", JobState.WAITING),
        ("broke", JobState.FAILED),
        ("done", JobState.COMPLETE),
        ("done", JobState.COMPLETE),
    ]
    assert found[2].result == '{"n":1}'
    assert found[1].failure is not None
    assert (found[1].failure.group, found[1].failure.message) == ("boom", "broke failed")
    assert found[0].result is None
    assert found[0].failure is None
    assert found[2].failure is None
    assert engine.outcomes([], now=NOW) == []

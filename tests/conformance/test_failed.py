"""failed_groups, failed pages and unfail."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobPage, JobState

from .helpers import T0, failed, get, jids, pop_jids


def fail_many(engine: Engine, group: str, names: list[str], start: float = T0) -> None:
    """Fail each job into `group`, one second apart, in the order given."""
    for i, jid in enumerate(names):
        failed(engine, jid, group=group, now=start + i)


@pytest.mark.requires(Capability.FAILURES)
def test_no_failures_means_no_groups(engine: Engine) -> None:
    assert engine.failed_groups(now=T0) == {}


@pytest.mark.requires(Capability.FAILURES)
def test_failed_groups_counts_the_jobs_of_each_group(engine: Engine) -> None:
    fail_many(engine, "boom", ["a", "b"])
    fail_many(engine, "bang", ["c"], start=T0 + 10)
    assert engine.failed_groups(now=T0 + 20) == {"boom": 2, "bang": 1}


@pytest.mark.requires(Capability.FAILURES)
def test_failed_gives_the_group_newest_failure_first(engine: Engine) -> None:
    fail_many(engine, "boom", ["a", "b", "c"])

    page = engine.failed("boom", now=T0 + 10)

    assert isinstance(page, JobPage)
    assert page.total == 3
    assert jids(page.jobs) == ["c", "b", "a"]
    assert all(job.state == JobState.FAILED for job in page.jobs)


@pytest.mark.requires(Capability.FAILURES)
def test_failed_pages_with_start_and_limit(engine: Engine) -> None:
    fail_many(engine, "boom", [f"j{i}" for i in range(5)])

    page = engine.failed("boom", 1, 2, now=T0 + 10)

    assert page.total == 5
    assert jids(page.jobs) == ["j3", "j2"]


@pytest.mark.requires(Capability.FAILURES)
def test_failed_of_an_unknown_group_is_empty(engine: Engine) -> None:
    assert engine.failed("nothing", now=T0) == JobPage(0, ())


@pytest.mark.requires(Capability.FAILURES)
def test_failed_keeps_groups_apart(engine: Engine) -> None:
    fail_many(engine, "boom", ["a"])
    fail_many(engine, "bang", ["b"], start=T0 + 1)
    assert jids(engine.failed("bang", now=T0 + 2).jobs) == ["b"]


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_unfail_moves_the_oldest_jobs_back_to_waiting(engine: Engine) -> None:
    fail_many(engine, "boom", ["a", "b", "c"])

    assert engine.unfail("q", "boom", 2, now=T0 + 10) == 2

    a, b, c = engine.multiget(["a", "b", "c"], now=T0 + 10)
    assert (a.state, b.state, c.state) == (JobState.WAITING, JobState.WAITING, JobState.FAILED)
    assert (a.failure, b.failure) == (None, None)
    assert engine.failed_groups(now=T0 + 10) == {"boom": 1}
    assert jids(engine.failed("boom", now=T0 + 10).jobs) == ["c"]


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_unfailed_jobs_get_their_retries_back(engine: Engine) -> None:
    engine.put("q", "j1", "Task", retries=2, now=T0)
    pop_jids(engine, "q")
    engine.retry("j1", "q", "w1", now=T0)
    pop_jids(engine, "q")
    engine.fail("j1", "w1", "boom", "broke", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).remaining == 1

    engine.unfail("q", "boom", now=T0 + 2)

    job = get(engine, "j1", T0 + 2)
    assert (job.retries, job.remaining) == (2, 2)


@pytest.mark.requires(Capability.FAILURES)
def test_unfail_defaults_to_25_jobs(engine: Engine) -> None:
    fail_many(engine, "boom", [f"j{i:02d}" for i in range(30)])
    assert engine.unfail("q", "boom", now=T0 + 40) == 25
    assert engine.failed("boom", now=T0 + 40).total == 5


@pytest.mark.requires(Capability.FAILURES)
def test_unfail_puts_the_jobs_into_the_queue_given(engine: Engine) -> None:
    fail_many(engine, "boom", ["a", "b"])

    engine.unfail("retry-here", "boom", now=T0 + 10)

    assert pop_jids(engine, "retry-here", count=5, now=T0 + 10) == ["a", "b"]
    assert pop_jids(engine, "q", count=5, now=T0 + 10) == []


@pytest.mark.requires(Capability.FAILURES)
def test_unfail_of_an_empty_group_moves_nothing(engine: Engine) -> None:
    assert engine.unfail("q", "nothing", now=T0) == 0


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_emptied_group_counts_zero(engine: Engine) -> None:
    fail_many(engine, "boom", ["a"])
    engine.unfail("q", "boom", now=T0 + 1)
    assert engine.failed_groups(now=T0 + 1).get("boom", 0) == 0
    assert engine.failed("boom", now=T0 + 1).total == 0

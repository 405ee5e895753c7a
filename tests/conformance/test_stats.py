"""Statistics (capability `stats`): per queue and UTC day, wait and run timings with a
148-bucket histogram, and counts of failures, failed jobs and lost locks.

Histogram buckets (docs/protocol.md): index s for s seconds (0-59), 59 + m for m minutes
(1-59, so 60 is [60 s, 120 s)), 118 + h for h hours (1-23, so 119 is [1 h, 2 h)),
141 + d for d days (1-6, so 142 is [1 d, 2 d)); 7 days and longer have no bucket.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from lanner import (
    Capability,
    Engine,
    InvalidName,
    JobState,
    MalformedArgument,
    QueueStats,
    TimingStats,
)

from .helpers import HEARTBEAT, T0, failed, get, pop_jids, put_all, require, running

BUCKETS = 148
DAY = 86400.0
D = 19_000 * DAY
"""Midnight (UTC) of a day, for the tests about day boundaries."""


def stats(engine: Engine, queue: str = "q", date: float = T0) -> QueueStats:
    return engine.stats(queue, date, now=date)


def only_bucket(histogram: tuple[int, ...]) -> int:
    """The index of the one non-empty bucket, which must hold exactly one value."""
    filled = [i for i, n in enumerate(histogram) if n]
    assert len(filled) == 1, f"expected one filled bucket, got {filled}"
    assert histogram[filled[0]] == 1
    return filled[0]


def count_mean(timing: TimingStats) -> tuple[int, float]:
    """The count and the mean, rounded to the microsecond (for exact comparison)."""
    return timing.count, round(timing.mean, 6)


def assert_empty(timing: TimingStats) -> None:
    assert timing.count == 0
    assert timing.std == 0
    assert timing.histogram == (0,) * BUCKETS


# -- empty stats --------------------------------------------------------------------------


def test_stats_of_an_unknown_queue_are_empty(engine: Engine) -> None:
    require(engine, Capability.STATS)
    result = stats(engine, "nothing")
    assert (result.retries, result.failed, result.failures) == (0, 0, 0)
    assert_empty(result.wait)
    assert_empty(result.run)


def test_stats_of_a_day_without_activity_are_empty(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", now=T0)
    result = stats(engine, date=T0 + 3 * DAY)
    assert (result.retries, result.failed, result.failures) == (0, 0, 0)
    assert_empty(result.wait)
    assert_empty(result.run)


def test_stats_returns_queue_stats_with_148_buckets(engine: Engine) -> None:
    require(engine, Capability.STATS)
    result = stats(engine)
    assert isinstance(result, QueueStats)
    assert isinstance(result.wait, TimingStats)
    assert len(result.wait.histogram) == BUCKETS
    assert len(result.run.histogram) == BUCKETS


# -- wait ---------------------------------------------------------------------------------


def test_wait_times_of_popped_jobs(engine: Engine) -> None:
    require(engine, Capability.STATS)
    put_all(engine, "q", [f"j{i}" for i in range(20)])
    for i in range(20):
        assert len(pop_jids(engine, "q", now=T0 + i)) == 1

    wait = stats(engine).wait

    assert wait.count == 20
    assert wait.mean == pytest.approx(9.5)
    assert wait.std == pytest.approx(5.916079783099)
    assert wait.histogram[0:20] == (1,) * 20
    assert sum(wait.histogram) == 20


def test_one_wait_has_a_std_of_zero(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.put("q", "j1", "Task", now=T0)
    pop_jids(engine, "q", now=T0 + 5)
    wait = stats(engine).wait
    assert count_mean(wait) == (1, 5.0)
    assert wait.std == 0
    assert only_bucket(wait.histogram) == 5


def test_an_empty_pop_records_no_wait(engine: Engine) -> None:
    require(engine, Capability.STATS)
    assert pop_jids(engine, "q", now=T0) == []
    assert stats(engine).wait.count == 0


def test_peek_records_no_wait(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.put("q", "j1", "Task", now=T0)
    engine.peek("q", now=T0 + 5)
    assert stats(engine).wait.count == 0


def test_wait_of_a_delayed_job_counts_from_its_due_time(engine: Engine) -> None:
    require(engine, Capability.STATS, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert pop_jids(engine, "q", now=T0 + 15) == ["j1"]
    wait = stats(engine).wait
    assert count_mean(wait) == (1, 5.0)
    assert only_bucket(wait.histogram) == 5


def test_wait_of_a_retried_job_counts_from_the_retry(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", now=T0)  # wait 0
    engine.retry("j1", "q", "w1", now=T0 + 10)
    assert pop_jids(engine, "q", now=T0 + 13) == ["j1"]  # wait 3
    wait = stats(engine).wait
    assert count_mean(wait) == (2, 1.5)
    assert (wait.histogram[0], wait.histogram[3]) == (1, 1)


def test_wait_of_a_job_retried_with_a_delay_counts_from_the_end_of_the_delay(
    engine: Engine,
) -> None:
    require(engine, Capability.STATS, Capability.DELAY)
    running(engine, "j1", now=T0)  # wait 0
    engine.retry("j1", "q", "w1", delay=5, now=T0 + 10)
    assert pop_jids(engine, "q", now=T0 + 22) == ["j1"]  # ready at T0 + 15: wait 7
    wait = stats(engine).wait
    assert count_mean(wait) == (2, 3.5)
    assert (wait.histogram[0], wait.histogram[7]) == (1, 1)


def test_wait_after_advancing_counts_from_the_put_into_the_next_queue(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", "q", now=T0)
    engine.complete("j1", "w1", "q", next="q2", now=T0 + 7)
    assert pop_jids(engine, "q2", now=T0 + 10) == ["j1"]
    wait = stats(engine, "q2").wait
    assert count_mean(wait) == (1, 3.0)


def test_a_job_handed_over_after_its_lock_ran_out_adds_no_wait(engine: Engine) -> None:
    """Only jobs popped from the waiting jobs count; an expired lock is not one."""
    require(engine, Capability.STATS)
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", now=T0)
    assert pop_jids(engine, "q", "w2", now=T0 + HEARTBEAT + 5) == ["j1"]
    assert stats(engine).wait.count == 1


# -- run ----------------------------------------------------------------------------------


def test_run_times_of_completed_jobs(engine: Engine) -> None:
    require(engine, Capability.STATS)
    names = [f"j{i}" for i in range(20)]
    put_all(engine, "q", names)
    assert pop_jids(engine, "q", count=20, now=T0) == names
    for i, jid in enumerate(names):
        engine.complete(jid, "w1", "q", now=T0 + i)

    run = stats(engine).run

    assert run.count == 20
    assert run.mean == pytest.approx(9.5)
    assert run.std == pytest.approx(5.916079783099)
    assert run.histogram[0:20] == (1,) * 20
    assert sum(run.histogram) == 20


def test_popping_records_no_run(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", now=T0)
    assert stats(engine).run.count == 0


def test_completing_with_next_records_a_run_in_the_queue_it_left(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", "q", now=T0)
    engine.complete("j1", "w1", "q", next="q2", now=T0 + 7)
    run = stats(engine, "q").run
    assert count_mean(run) == (1, 7.0)
    assert only_bucket(run.histogram) == 7
    assert stats(engine, "q2").run.count == 0


def test_complete_many_records_runs(engine: Engine) -> None:
    require(engine, Capability.STATS)
    put_all(engine, "q", ["a", "b"])
    pop_jids(engine, "q", count=2, now=T0)
    assert engine.complete_many(["a", "b"], "w1", "q", now=T0 + 4) == ["a", "b"]
    run = stats(engine).run
    assert count_mean(run) == (2, 4.0)


def test_failing_records_no_run(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", now=T0)
    engine.fail("j1", "w1", "boom", "broken", now=T0 + 3)
    assert stats(engine).run.count == 0


# -- histogram buckets --------------------------------------------------------------------

MINUTE = 60.0
HOUR = 3600.0

BUCKET_CASES: list[tuple[float, int]] = [
    (0.0, 0),
    (0.5, 0),
    (1.0, 1),
    (59.0, 59),
    (59.9, 59),
    (MINUTE, 60),
    (90.0, 60),
    (119.9, 60),
    (2 * MINUTE, 61),
    (59 * MINUTE, 118),
    (HOUR - 0.5, 118),
    (HOUR, 119),
    (1.5 * HOUR, 119),
    (2 * HOUR, 120),
    (23 * HOUR, 141),
    (DAY - 1, 141),
    (DAY, 142),
    (1.5 * DAY, 142),
    (2 * DAY, 143),
    (6 * DAY, 147),
    (7 * DAY - 1, 147),
]


@pytest.mark.parametrize(("seconds", "bucket"), BUCKET_CASES, ids=[str(c) for c in BUCKET_CASES])
def test_a_wait_lands_in_its_bucket(engine: Engine, seconds: float, bucket: int) -> None:
    require(engine, Capability.STATS)
    engine.put("q", "j1", "Task", now=T0)
    popped_at = T0 + seconds
    assert pop_jids(engine, "q", now=popped_at) == ["j1"]
    wait = stats(engine, date=popped_at).wait
    assert count_mean(wait) == (1, seconds)
    assert only_bucket(wait.histogram) == bucket


@pytest.mark.parametrize(("seconds", "bucket"), BUCKET_CASES, ids=[str(c) for c in BUCKET_CASES])
def test_a_run_lands_in_its_bucket(engine: Engine, seconds: float, bucket: int) -> None:
    require(engine, Capability.STATS)
    engine.config_set("heartbeat", int(30 * DAY), now=T0)
    running(engine, "j1", now=T0)
    done_at = T0 + seconds
    engine.complete("j1", "w1", "q", now=done_at)
    run = stats(engine, date=done_at).run
    assert count_mean(run) == (1, seconds)
    assert only_bucket(run.histogram) == bucket


def test_a_wait_of_a_week_or_more_is_counted_without_a_bucket(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.put("q", "j1", "Task", now=T0)
    popped_at = T0 + 8 * DAY
    assert pop_jids(engine, "q", now=popped_at) == ["j1"]
    wait = stats(engine, date=popped_at).wait
    assert count_mean(wait) == (1, 8 * DAY)
    assert wait.histogram == (0,) * BUCKETS


# -- per day, per queue -------------------------------------------------------------------


def test_a_pop_counts_on_the_utc_day_it_happens(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.put("q", "j1", "Task", now=D + DAY - 10)
    assert pop_jids(engine, "q", now=D + DAY + 5) == ["j1"]

    assert stats(engine, date=D + DAY - 10).wait.count == 0
    wait = stats(engine, date=D + DAY + 5).wait
    assert count_mean(wait) == (1, 15.0)


def test_any_time_within_the_day_selects_it(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.put("q", "j1", "Task", now=D + 100)
    pop_jids(engine, "q", now=D + 103)
    for date in [D, D + 1, D + 103, D + DAY / 2, D + DAY - 0.5]:
        assert stats(engine, date=date).wait.count == 1, date
    assert stats(engine, date=D - 0.5).wait.count == 0
    assert stats(engine, date=D + DAY).wait.count == 0


def test_a_run_counts_on_the_day_of_the_completion(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", now=D + DAY - 5)
    engine.complete("j1", "w1", "q", now=D + DAY + 5)
    assert stats(engine, date=D + DAY - 5).run.count == 0
    run = stats(engine, date=D + DAY + 5).run
    assert count_mean(run) == (1, 10.0)


def test_stats_are_per_queue(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.put("q1", "a", "Task", now=T0)
    engine.put("q2", "b", "Task", now=T0)
    pop_jids(engine, "q1", now=T0 + 2)
    engine.complete("a", "w1", "q1", now=T0 + 3)

    first = stats(engine, "q1")
    assert (first.wait.count, first.run.count) == (1, 1)
    second = stats(engine, "q2")
    assert (second.wait.count, second.run.count) == (0, 0)


def test_failures_are_per_queue(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", "q1", now=T0)
    assert (stats(engine, "q1").failed, stats(engine, "q1").failures) == (1, 1)
    assert (stats(engine, "q2").failed, stats(engine, "q2").failures) == (0, 0)


# -- failures and failed ------------------------------------------------------------------


def test_fail_counts_a_failure_and_a_failed_job(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", now=T0)
    result = stats(engine)
    assert (result.failed, result.failures) == (1, 1)


def test_failures_count_every_failure_failed_counts_jobs_still_failed(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", now=T0)
    failed(engine, "j1", now=T0 + 10)  # re-put, popped and failed again
    failed(engine, "j2", now=T0 + 20)
    result = stats(engine)
    assert (result.failed, result.failures) == (2, 3)


def test_a_reput_of_a_failed_job_decrements_failed_but_not_failures(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", now=T0)
    engine.put("q", "j1", "Task", now=T0 + 5)
    result = stats(engine)
    assert (result.failed, result.failures) == (0, 1)


def test_a_reput_decrements_failed_of_the_day_of_the_failure(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed_at = D + 1000
    put_at = failed_at + 1.5 * DAY
    failed(engine, "j1", now=failed_at)
    engine.put("q", "j1", "Task", now=put_at)

    that_day = stats(engine, date=failed_at)
    assert (that_day.failed, that_day.failures) == (0, 1)
    later = stats(engine, date=put_at)
    assert (later.failed, later.failures) == (0, 0)


def test_a_reput_into_another_queue_decrements_failed_of_the_original_queue(
    engine: Engine,
) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", "q", now=T0)
    engine.put("other", "j1", "Task", now=T0 + 5)
    assert (stats(engine, "q").failed, stats(engine, "q").failures) == (0, 1)
    assert (stats(engine, "other").failed, stats(engine, "other").failures) == (0, 0)


def test_a_reput_of_a_job_that_is_not_failed_changes_no_count(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", now=T0)
    engine.put("q", "j2", "Task", now=T0)
    engine.put("q", "j2", "Task", now=T0 + 5)  # a move of a waiting job
    assert (stats(engine).failed, stats(engine).failures) == (1, 1)


def test_cancel_of_a_failed_job_decrements_failed(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", now=T0)
    assert engine.cancel(["j1"], now=T0 + 5) == ["j1"]
    result = stats(engine)
    assert (result.failed, result.failures) == (0, 1)


def test_unfail_decrements_failed(engine: Engine) -> None:
    require(engine, Capability.STATS)
    failed(engine, "j1", group="boom", now=T0)
    failed(engine, "j2", group="boom", now=T0 + 1)
    assert engine.unfail("q", "boom", 1, now=T0 + 5) == 1
    result = stats(engine)
    assert (result.failed, result.failures) == (1, 2)


def test_exhausting_retries_with_retry_counts_a_failure(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", retries=0, now=T0)
    engine.retry("j1", "q", "w1", now=T0 + 3)
    assert get(engine, "j1", T0 + 3).state == JobState.FAILED
    result = stats(engine)
    assert (result.failed, result.failures) == (1, 1)


def test_a_retry_with_retries_left_counts_no_failure(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", retries=1, now=T0)
    engine.retry("j1", "q", "w1", now=T0 + 3)
    result = stats(engine)
    assert (result.failed, result.failures) == (0, 0)


def test_exhausting_retries_by_losing_the_lock_counts_a_failure(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", retries=0, now=T0)
    later = T0 + HEARTBEAT + 1
    assert pop_jids(engine, "q", "w2", now=later) == []
    assert get(engine, "j1", later).state == JobState.FAILED
    result = stats(engine, date=later)
    assert (result.failed, result.failures) == (1, 1)


def test_a_reput_of_a_job_failed_by_lost_locks_decrements_failed(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", retries=0, now=T0)
    later = T0 + HEARTBEAT + 1
    pop_jids(engine, "q", "w2", now=later)
    engine.put("q", "j1", "Task", now=later + 1)
    result = stats(engine, date=later)
    assert (result.failed, result.failures) == (0, 1)


# -- retries (lost locks) -----------------------------------------------------------------


def test_a_lock_that_ran_out_counts_a_retry(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.config_set("heartbeat", -10, now=T0)
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", now=T0)
    assert stats(engine).retries == 0
    assert pop_jids(engine, "q", "w2", now=T0) == ["j1"]
    assert stats(engine).retries == 1


def test_a_pop_after_the_lock_and_its_grace_ran_out_counts_one_retry(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", now=T0)
    expired = T0 + HEARTBEAT
    assert pop_jids(engine, "q", "w2", now=expired) == []  # grace granted
    assert pop_jids(engine, "q", "w2", now=expired + 10) == ["j1"]  # handed over
    assert stats(engine, date=expired + 10).retries == 1


def test_a_lock_still_held_counts_no_retry(engine: Engine) -> None:
    require(engine, Capability.STATS)
    running(engine, "j1", now=T0)
    assert pop_jids(engine, "q", "w2", now=T0 + HEARTBEAT - 1) == []
    engine.complete("j1", "w1", "q", now=T0 + HEARTBEAT - 1)
    assert stats(engine).retries == 0


def test_retries_are_per_queue(engine: Engine) -> None:
    require(engine, Capability.STATS)
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", "q1", now=T0)
    pop_jids(engine, "q1", "w2", now=T0 + HEARTBEAT)
    assert stats(engine, "q1").retries == 1
    assert stats(engine, "q2").retries == 0


# -- recurring jobs -----------------------------------------------------------------------


def test_wait_of_a_spawned_recurring_job_counts_from_its_due_time(engine: Engine) -> None:
    require(engine, Capability.STATS, Capability.RECURRING)
    engine.recur("q", "rec", "Task", "{}", 60.0, now=T0)
    assert pop_jids(engine, "q", now=T0 + 30) == ["rec-1"]
    wait = stats(engine).wait
    assert count_mean(wait) == (1, 30.0)
    assert only_bucket(wait.histogram) == 30


# -- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize("queue", ["", "1q", "a b"], ids=repr)
def test_stats_of_a_bad_queue_name_is_an_invalid_name(engine: Engine, queue: Any) -> None:
    require(engine, Capability.STATS)
    with pytest.raises(InvalidName):
        engine.stats(queue, T0, now=T0)


@pytest.mark.parametrize("date", [math.nan, math.inf, "1000", None, True], ids=repr)
def test_stats_of_a_bad_date_is_malformed(engine: Engine, date: Any) -> None:
    require(engine, Capability.STATS)
    with pytest.raises(MalformedArgument):
        engine.stats("q", date, now=T0)


@pytest.mark.parametrize("queue", [None, 5, b"q"], ids=repr)
def test_stats_of_a_queue_of_another_type_is_malformed(engine: Engine, queue: Any) -> None:
    require(engine, Capability.STATS)
    with pytest.raises(MalformedArgument):
        engine.stats(queue, T0, now=T0)

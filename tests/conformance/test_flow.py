"""FLOW: rate limits and concurrency keys, held in the store (docs/flow-control.md).
Fair keys' turns are FAIRNESS, in test_fairness.py.

A pop takes only the jobs their flow lets run: at most `max_concurrency` running jobs per
concurrency key, wherever they were popped, and at most `limit` starts per `period` in each
rate bucket. A job held back spends no retry; one over a rate is scheduled for when its
bucket has room.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lanner import Capability, Engine, Flow, MalformedArgument, NewJob, RateLimit, Unsupported
from lanner.records import RATE_LATE_SHARE, rate_lead, rate_slack, rate_window

from .helpers import HEARTBEAT, T0, get, pop_jids

pytestmark = [pytest.mark.requires(Capability.FLOW), pytest.mark.driven_clock]


SLACK, WINDOW, LEAD = rate_slack(10.0), rate_window(10.0), rate_lead(10.0)


def one_at_a_time(key: str = "user-1") -> Flow:
    return Flow(concurrency_key=key, max_concurrency=1)


def per_10s(limit: int, bucket: str = "api") -> Flow:
    return Flow(rates=(RateLimit(bucket, limit, 10.0),))


def test_a_key_at_its_cap_holds_its_jobs_not_others(engine: Engine) -> None:
    engine.put_many(
        [NewJob("q", f"a{i}", "Task", flow=one_at_a_time()) for i in range(3)]
        + [NewJob("q", "other", "Task"), NewJob("q", "b0", "Task", flow=one_at_a_time("user-2"))],
        now=T0,
    )
    assert sorted(pop_jids(engine, "q", count=10, now=T0)) == ["a0", "b0", "other"]
    assert pop_jids(engine, "q", count=10, now=T0) == []
    assert get(engine, "a1").state == "waiting"


def test_each_end_of_a_run_frees_its_slot(engine: Engine) -> None:
    engine.put_many([NewJob("q", f"a{i}", "Task", flow=one_at_a_time()) for i in range(4)], now=T0)
    assert pop_jids(engine, "q", count=10, now=T0) == ["a0"]
    engine.complete("a0", "w1", "q", now=T0)
    assert pop_jids(engine, "q", count=10, now=T0) == ["a1"]
    engine.fail("a1", "w1", "boom", "failed", now=T0)
    assert pop_jids(engine, "q", count=10, now=T0) == ["a2"]
    engine.retry("a2", "q", "w1", now=T0)
    # Retried, a2 waits again, ahead of a3 by its place: one of them runs, not both.
    assert len(pop_jids(engine, "q", count=10, now=T0)) == 1
    assert pop_jids(engine, "q", count=10, now=T0) == []


@pytest.mark.requires(Capability.CROSS_QUEUE_FLOW)
def test_the_cap_holds_across_queues_and_workers(
    engine: Engine, connect: Callable[[], Engine]
) -> None:
    other = connect()
    engine.put_many(
        [
            NewJob("q1", "x1", "Task", flow=Flow("tenant", 2)),
            NewJob("q1", "x2", "Task", flow=Flow("tenant", 2)),
            NewJob("q2", "y1", "Task", flow=Flow("tenant", 2)),
        ],
        now=T0,
    )
    assert len(pop_jids(engine, "q1", count=1, now=T0)) == 1
    assert pop_jids(other, "q2", "w2", count=5, now=T0) == ["y1"]
    assert pop_jids(engine, "q1", count=5, now=T0) == []


def test_a_dead_workers_slot_goes_with_its_job_to_the_next_worker(engine: Engine) -> None:
    engine.config_set("grace-period", 0)
    engine.put_many([NewJob("q", f"a{i}", "Task", flow=one_at_a_time()) for i in range(2)], now=T0)
    assert pop_jids(engine, "q", "dead", count=5, now=T0) == ["a0"]
    later = T0 + HEARTBEAT + 1
    # Its lock ran out: a0 goes to the next worker, still the key's one running job.
    assert pop_jids(engine, "q", "w2", count=5, now=later) == ["a0"]
    assert pop_jids(engine, "q", "w3", count=5, now=later) == []
    engine.complete("a0", "w2", "q", now=later)
    assert pop_jids(engine, "q", "w3", count=5, now=later) == ["a1"]


def test_a_rate_lets_limit_jobs_start_per_period_and_spends_no_retry(engine: Engine) -> None:
    engine.put_many(
        [NewJob("q", f"r{i}", "Task", retries=3, flow=per_10s(2)) for i in range(5)], now=T0
    )
    assert pop_jids(engine, "q", count=10, now=T0) == ["r0"]  # alone
    assert pop_jids(engine, "q", count=10, now=T0) == ["r1"]
    assert pop_jids(engine, "q", count=10, now=T0) == []
    held = get(engine, "r2")
    assert held.state == "scheduled"
    assert held.remaining == 3
    # Their starts count from a slack on (their workers reach them); r2 and r3 come back
    # a lead before their turn, r4 a window later.
    turn = T0 + SLACK + WINDOW
    assert pop_jids(engine, "q", count=10, now=T0 + 5) == []
    assert pop_jids(engine, "q", count=10, now=turn - LEAD - 0.01) == []
    assert pop_jids(engine, "q", count=10, now=turn - LEAD) == ["r2"]
    assert pop_jids(engine, "q", count=10, now=turn - LEAD) == ["r3"]
    assert pop_jids(engine, "q", count=10, now=turn + 5) == []
    assert pop_jids(engine, "q", count=10, now=turn + WINDOW - LEAD) == ["r4"]


def test_a_rate_limited_job_is_popped_alone_with_its_start_window(engine: Engine) -> None:
    engine.put_many(
        [
            NewJob("q", "n0", "Task"),
            NewJob("q", "r0", "Task", flow=per_10s(5)),
            NewJob("q", "n1", "Task"),
            NewJob("q", "n2", "Task"),
        ],
        now=T0,
    )
    # Never behind another job of its batch: its run starts as soon as it is handed out.
    assert pop_jids(engine, "q", count=10, now=T0) == ["n0"]
    assert pop_jids(engine, "q", count=10, now=T0) == ["r0"]
    assert pop_jids(engine, "q", count=10, now=T0) == ["n1", "n2"]
    popped = [event for event in get(engine, "r0").history if event.what == "popped"]
    assert popped[-1].details["start"] == pytest.approx(T0 + SLACK)
    assert popped[-1].details["by"] == pytest.approx(T0 + SLACK * (1 + RATE_LATE_SHARE))
    assert "start" not in get(engine, "n1").history[-1].details


def test_a_rate_limited_job_given_back_unstarted_frees_its_start(engine: Engine) -> None:
    engine.put_many([NewJob("q", f"r{i}", "Task", flow=per_10s(1)) for i in range(2)], now=T0)
    assert pop_jids(engine, "q", now=T0) == ["r0"]
    engine.release(["r0"], "w1", "q", now=T0)  # its worker could not start it in time
    assert pop_jids(engine, "q", now=T0 + 1) == ["r0"]  # the bucket has room again
    assert pop_jids(engine, "q", now=T0 + 1) == []  # r1 held: r0's new start counts


@pytest.mark.requires(Capability.CROSS_QUEUE_FLOW)
def test_a_bucket_is_shared_by_every_queue_that_names_it(engine: Engine) -> None:
    engine.put_many(
        [NewJob("q1", f"a{i}", "Task", flow=per_10s(3)) for i in range(3)]
        + [NewJob("q2", f"b{i}", "Task", flow=per_10s(3)) for i in range(3)],
        now=T0,
    )
    popped = []
    for _ in range(4):
        popped += pop_jids(engine, "q1", count=2, now=T0) + pop_jids(engine, "q2", count=5, now=T0)
    assert len(popped) == 3
    assert pop_jids(engine, "q1", count=5, now=T0 + 1) == []


def test_the_cap_holds_across_workers(engine: Engine, connect: Callable[[], Engine]) -> None:
    other = connect()
    engine.put_many([NewJob("q", f"x{i}", "Task", flow=Flow("tenant", 2)) for i in range(3)],
                    now=T0)  # fmt: skip
    assert len(pop_jids(engine, "q", count=1, now=T0)) == 1
    assert len(pop_jids(other, "q", "w2", count=5, now=T0)) == 1
    assert pop_jids(engine, "q", count=5, now=T0) == []
    assert pop_jids(other, "q", "w2", count=5, now=T0) == []


def test_a_queue_and_its_fanout_children_share_a_key(engine: Engine) -> None:
    if Capability.FANOUT not in engine.capabilities:
        pytest.skip(f"{engine.name} engine lacks fanout")
    engine.put_many([NewJob("p+c", "c1", "Task", flow=Flow("k", 1)),
                     NewJob("p", "p1", "Task", flow=Flow("k", 1))], now=T0)  # fmt: skip
    assert pop_jids(engine, "p", count=5, now=T0) == ["p1"]
    assert pop_jids(engine, "p+c", count=5, now=T0) == []


def test_a_key_of_one_queue_named_from_another_is_refused(engine: Engine) -> None:
    """Where a key's state stays with its queue (Redis Cluster: its partition), a second
    queue naming it is refused in one line, rather than counted apart."""
    if Capability.CROSS_QUEUE_FLOW in engine.capabilities:
        pytest.skip(f"{engine.name} engine enforces a key across queues")
    engine.put("q1", "a", "Task", flow=Flow("tenant", 1), now=T0)
    with pytest.raises(Unsupported, match=r"concurrency key 'tenant' .*'q1'.*'q2'") as raised:
        engine.put("q2", "b", "Task", flow=Flow("tenant", 1), now=T0)
    assert raised.value.capability == "cross-queue-flow"
    assert "\n" not in str(raised.value)
    with pytest.raises(Unsupported, match="rate bucket 'api'"):
        engine.put_many([NewJob("q3", "c", "Task", flow=per_10s(2)),
                         NewJob("q4", "d", "Task", flow=per_10s(2))], now=T0)  # fmt: skip
    assert engine.get("b", now=T0) is None
    assert engine.get("c", now=T0) is None
    engine.put("q1", "e", "Task", flow=Flow("tenant", 1), now=T0)  # its own queue still may
    assert pop_jids(engine, "q1", count=5, now=T0) == ["a"]


def test_a_job_runs_only_when_both_its_key_and_its_rate_allow(engine: Engine) -> None:
    both = Flow("k", 1, (RateLimit("api", 5, 10.0),))
    engine.put_many([NewJob("q", f"j{i}", "Task", flow=both) for i in range(3)], now=T0)
    assert pop_jids(engine, "q", count=5, now=T0) == ["j0"]
    engine.complete("j0", "w1", "q", now=T0 + 1)
    assert pop_jids(engine, "q", count=5, now=T0 + 1) == ["j1"]


def test_a_malformed_flow_is_refused(engine: Engine) -> None:
    with pytest.raises(MalformedArgument, match="go together"):
        engine.put("q", "j", "Task", flow=Flow("k", 0), now=T0)
    with pytest.raises(MalformedArgument, match="rate limit"):
        engine.put("q", "j", "Task", flow=Flow(rates=(RateLimit("b", 0, 1.0),)), now=T0)


def test_the_store_shows_what_each_control_holds_back(engine: Engine) -> None:
    engine.put_many(
        [NewJob("q", f"k{i}", "Task", flow=one_at_a_time("k")) for i in range(3)]
        + [NewJob("q", f"r{i}", "Task", flow=per_10s(2, "api")) for i in range(5)],
        now=T0,
    )
    for _ in range(4):  # k0, then r0 and r1 alone, then the rest held
        pop_jids(engine, "q", count=10, now=T0)
    state = engine.flow_state(now=T0 + 1)
    [key] = state.keys
    assert (key.key, key.running, key.cap, key.held) == ("k", 1, 1, 2)
    [bucket] = state.buckets
    assert (bucket.bucket, bucket.limit, bucket.period, bucket.recent) == ("api", 2, 10.0, 2)
    assert bucket.held == 3
    assert bucket.next_at == pytest.approx(T0 + SLACK + WINDOW)

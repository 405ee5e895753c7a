"""FAIRNESS: a queue's jobs of different fair keys take turns (docs/flow-control.md).

Every engine with the capability takes fair jobs as it takes any job: each popped once,
settled as any other. The turns themselves are the store's pop order on SQLite and Redis
(tested here, by `now`); on SQS they are SQS's fair queues, which favour the groups with
fewer messages in flight in an order of SQS's own, on SQS's clock: what the SQS engine
sends for them (a MessageGroupId per key) is tested in tests/unit/sqs_engine/test_flow.py.
"""

from __future__ import annotations

import time

import pytest

from lanner import Capability, Engine, Flow, NewJob

from .helpers import T0, pop_jids

pytestmark = pytest.mark.requires(Capability.FAIRNESS)


def fair(jid: str, key: str, queue: str = "q") -> NewJob:
    return NewJob(queue, jid, "Task", flow=Flow(fair_key=key))


def pop_all(engine: Engine, queue: str, expected: int) -> list[str]:
    """Pop until `expected` jobs came (a broker may hand out fewer than it holds per call)."""
    taken: list[str] = []
    deadline = time.monotonic() + 30
    while len(taken) < expected and time.monotonic() < deadline:
        taken += pop_jids(engine, queue, count=expected - len(taken), now=T0)
    return taken


def test_fair_jobs_are_taken_and_settled_as_any_job(engine: Engine) -> None:
    jobs = [fair(f"{key}{i}", f"tenant-{key}") for key in "abc" for i in range(3)]
    jobs += [NewJob("q", f"plain{i}", "Task") for i in range(2)]
    engine.put_many(jobs, now=T0)
    taken = pop_all(engine, "q", len(jobs))
    assert sorted(taken) == sorted(job.jid for job in jobs)
    assert sorted(engine.complete_many(taken, "w1", "q", now=T0)) == sorted(taken)
    assert pop_jids(engine, "q", count=5, now=T0) == []
    counts = engine.queue_counts("q", now=T0)
    assert (counts.waiting, counts.running) == (0, 0)


def test_a_released_fair_job_comes_back(engine: Engine) -> None:
    engine.put("q", "j1", "Task", flow=Flow(fair_key="tenant-a"), now=T0)
    assert pop_all(engine, "q", 1) == ["j1"]
    assert engine.release(["j1"], "w1", "q", now=T0) == ["j1"]
    assert pop_all(engine, "q", 1) == ["j1"]


@pytest.mark.driven_clock
def test_a_burst_of_one_fair_key_takes_turns_with_the_others(engine: Engine) -> None:
    engine.put_many(
        [NewJob("q", f"a{i}", "Task", flow=Flow(fair_key="tenant-a")) for i in range(30)],
        now=T0,
    )
    assert pop_jids(engine, "q", count=2, now=T0) == ["a0", "a1"]
    engine.put_many(
        [
            NewJob("q", f"{key}{i}", "Task", flow=Flow(fair_key=f"tenant-{key}"))
            for i in range(3)
            for key in ("b", "c")
        ],
        now=T0 + 1,
    )
    popped = [pop_jids(engine, "q", now=T0 + 2 + i)[0] for i in range(9)]
    assert sorted(jid for jid in popped if jid[0] != "a") == ["b0", "b1", "b2", "c0", "c1", "c2"]
    assert [jid for jid in popped if jid[0] == "a"] == ["a2", "a3", "a4"]


@pytest.mark.driven_clock
def test_fair_jobs_of_one_key_keep_their_order(engine: Engine) -> None:
    engine.put_many(
        [NewJob("q", f"a{i}", "Task", flow=Flow(fair_key="k")) for i in range(5)], now=T0
    )
    assert [pop_jids(engine, "q", now=T0 + i)[0] for i in range(5)] == [f"a{i}" for i in range(5)]

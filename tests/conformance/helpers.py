"""Small helpers shared by the conformance tests. Every time is explicit (`now=`)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lanner import Capability, Engine, Job

T0 = 1000.0
"""The time most tests start at; a job popped at T0 has its lock until T0 + 60."""

HEARTBEAT = 60.0
GRACE = 10.0


def require(engine: Engine, *capabilities: Capability) -> None:
    """Skip the test unless the engine has every capability given."""
    missing = [c.value for c in capabilities if c not in engine.capabilities]
    if missing:
        pytest.skip(f"{engine.name} engine lacks {', '.join(missing)}")


def get(engine: Engine, jid: str, now: float = T0) -> Job:
    """The job, which must exist."""
    job = engine.get(jid, now=now)
    assert job is not None, f"job {jid!r} does not exist"
    return job


def jids(jobs: Sequence[Job]) -> list[str]:
    return [job.jid for job in jobs]


def whats(job: Job) -> list[str]:
    """What happened to the job, oldest first."""
    return [event.what for event in job.history]


def put_all(engine: Engine, queue: str, names: Sequence[str], now: float = T0) -> None:
    for jid in names:
        engine.put(queue, jid, "Task", now=now)


def pop_jids(
    engine: Engine, queue: str, worker: str = "w1", count: int = 1, now: float = T0
) -> list[str]:
    return jids(engine.pop(queue, worker, count, now=now))


def running(
    engine: Engine,
    jid: str = "j",
    queue: str = "q",
    worker: str = "w1",
    now: float = T0,
    retries: int | None = None,
) -> Job:
    """Put a job and pop it for `worker`; the queue must hold no other waiting job."""
    engine.put(queue, jid, "Task", retries=retries, now=now)
    popped = engine.pop(queue, worker, now=now)
    assert jids(popped) == [jid]
    return popped[0]


def failed(
    engine: Engine,
    jid: str = "j",
    queue: str = "q",
    group: str = "boom",
    worker: str = "w1",
    now: float = T0,
) -> None:
    """Put, pop and fail a job into `group` (read it back with `get`, where LOOKUP is)."""
    running(engine, jid, queue, worker, now)
    engine.fail(jid, worker, group, f"{jid} failed", now=now)


def completed(
    engine: Engine, jid: str = "j", queue: str = "q", worker: str = "w1", now: float = T0
) -> None:
    """Put, pop and complete a job."""
    running(engine, jid, queue, worker, now)
    engine.complete(jid, worker, queue, now=now)


def in_state(engine: Engine, state: str, jid: str = "j", queue: str = "q") -> None:
    """Make a job in one of the core states: waiting, running, failed or complete (at T0)."""
    if state == "waiting":
        engine.put(queue, jid, "Task", now=T0)
    elif state == "running":
        running(engine, jid, queue)
    elif state == "failed":
        failed(engine, jid, queue)
    elif state == "complete":
        completed(engine, jid, queue)
    else:
        raise AssertionError(f"no recipe for state {state!r}")

"""Helpers of the recurring-job conformance tests.

A template made at T0 with interval 60 has runs due at T0, T0 + 60, T0 + 120, ...
"""

from __future__ import annotations

from typing import Any

from lanner import Engine, RecurringJob

from .helpers import T0, get

INTERVAL = 60.0


def recur(engine: Engine, queue: str = "q", jid: str = "rec", now: float = T0, **kw: Any) -> None:
    """A template `jid` in `queue`, klass Task, data {}, every 60 s from `now`."""
    assert engine.recur(queue, jid, "Task", "{}", INTERVAL, now=now, **kw) == jid


def template(engine: Engine, jid: str = "rec", now: float = T0) -> RecurringJob:
    """The template, which must exist."""
    found = engine.recur_get(jid, now=now)
    assert found is not None, f"recurring job {jid!r} does not exist"
    return found


def put_times(engine: Engine, spawned: list[str], now: float) -> list[float]:
    """When each job's first history entry, its `put`, says it was put."""
    firsts = [get(engine, jid, now).history[0] for jid in spawned]
    assert {event.what for event in firsts} == {"put"}
    return [event.when for event in firsts]


def runs(first: int, last: int) -> list[str]:
    return [f"rec-{n}" for n in range(first, last + 1)]

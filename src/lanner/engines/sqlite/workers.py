"""The SQLite engine's worker registry: who popped lately, and which locks each holds.

A worker is registered (or its `last_seen` refreshed, at most once a second) by its pops;
those idle longer than `max-worker-age` are forgotten when the registry is read.
"""

from __future__ import annotations

import sqlite3

from lanner.engines.sqlite import settings
from lanner.records import WorkerCounts, WorkerJobs


def registered(conn: sqlite3.Connection, now: float) -> list[WorkerCounts]:
    """Known workers, most recently seen first (a write: the idle are pruned)."""
    max_age = settings.number(settings.read_all(conn), "max-worker-age")
    conn.execute("DELETE FROM workers WHERE last_seen < ?", (now - max_age,))
    found = conn.execute(
        "SELECT name, "
        "  (SELECT count(*) FROM jobs WHERE worker = name AND state = 'running' "
        "   AND expires > :now), "
        "  (SELECT count(*) FROM jobs WHERE worker = name AND state = 'running' "
        "   AND expires <= :now) "
        "FROM workers ORDER BY last_seen DESC, name",
        {"now": now},
    ).fetchall()
    return [WorkerCounts(name, jobs, stalled) for name, jobs, stalled in found]


def held(conn: sqlite3.Connection, worker: str, now: float) -> WorkerJobs:
    """The jobs a worker's locks hold: live ones, and those whose lock ran out."""
    found = conn.execute(
        "SELECT jid, expires > ? FROM jobs WHERE worker = ? AND state = 'running' "
        "ORDER BY expires, jid",
        (now, worker),
    ).fetchall()
    return WorkerJobs(
        jobs=tuple(jid for jid, live in found if live),
        stalled=tuple(jid for jid, live in found if not live),
    )


def deregister(conn: sqlite3.Connection, workers: list[str]) -> None:
    conn.executemany("DELETE FROM workers WHERE name = ?", [(w,) for w in workers])

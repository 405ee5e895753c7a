"""Queues of the SQLite engine as a whole: counts, listings, pausing, failure groups.

Counts and listings read the partial index of each state (schema.py), so they cost what
the jobs of that state and queue cost, not the whole table; the waiting jobs, which may be
millions, are counted from the queue's usage instead (`counts`), as are the scheduled and
depends ones, and the failed jobs of each group from `failure_counts` (all kept by the
usage triggers, schema.py).
"""

from __future__ import annotations

import sqlite3

from lanner import checks
from lanner.engines.sqlite import put, rows, settings
from lanner.engines.sqlite.rows import JOB_COLUMNS
from lanner.records import JobPage, NewJob, QueueCounts

_LISTINGS = {
    "waiting": "(state = 'waiting' OR (state = 'scheduled' AND ready_at <= :now)) "
    "ORDER BY priority DESC, ready_at, seq",
    "running": "state = 'running' AND expires > :now ORDER BY expires, seq",
    "stalled": "((state = 'running' AND expires <= :now) OR state = 'stalled') "
    "ORDER BY expires, seq",
    "scheduled": "state = 'scheduled' AND ready_at > :now ORDER BY ready_at, seq",
    "depends": "state = 'depends' ORDER BY seq",
}
"""Per-queue listings of `jobs()`: which rows, in which order (module constants only)."""


def all_counts(conn: sqlite3.Connection, now: float) -> list[QueueCounts]:
    known = conn.execute("SELECT name, paused FROM queues ORDER BY name").fetchall()
    return [counts(conn, name, bool(paused), now) for name, paused in known]


def counts_of(conn: sqlite3.Connection, queue: str, now: float) -> QueueCounts:
    row = conn.execute("SELECT paused FROM queues WHERE name = ?", (queue,)).fetchone()
    return counts(conn, queue, bool(row and row[0]), now)


def counts(conn: sqlite3.Connection, queue: str, paused: bool, now: float) -> QueueCounts:
    # The states a backlog piles up in are counted by the queue's usage row (the jobs it
    # holds, and of them the scheduled and the depends ones: kept exact by put, finish and
    # the usage triggers), not by count(*) over their index (0.34 s for a million waiting
    # jobs, 28 ms for half a million scheduled ones): the waiting jobs are what the queue
    # holds less the other states. The due scheduled jobs (counted as waiting), running
    # and stalled ones are counted from their partial indexes: a pop takes the due ones,
    # and the others are held by workers.
    held, scheduled, depends, due, running, expired, stalled, recurring = conn.execute(
        "SELECT "
        "coalesce((SELECT items FROM queue_usage WHERE queue = :q), 0), "
        "coalesce((SELECT scheduled FROM queue_usage WHERE queue = :q), 0), "
        "coalesce((SELECT depends FROM queue_usage WHERE queue = :q), 0), "
        "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'scheduled' "
        "  AND ready_at <= :now), "
        "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'running' "
        "  AND expires > :now), "
        "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'running' "
        "  AND expires <= :now), "
        "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'stalled'), "
        "(SELECT count(*) FROM recurring WHERE queue = :q)",
        {"q": queue, "now": now},
    ).fetchone()
    waiting = held - scheduled - depends - running - expired - stalled
    return QueueCounts(
        name=queue,
        waiting=waiting + due,
        stalled=expired + stalled,
        running=running,
        scheduled=scheduled - due,
        depends=depends,
        recurring=recurring,
        paused=paused,
    )


def listing(conn: sqlite3.Connection, command: checks.Listing) -> list[str]:
    """The jids of `jobs()`: one page of one state (of one queue)."""
    page: dict[str, object] = {"offset": command.offset, "count": command.limit, "now": command.now}
    if command.state == "complete":
        where = "state = 'complete' ORDER BY finished_at DESC, seq DESC"
    elif command.state == "recurring":
        found = conn.execute(
            "SELECT jid FROM recurring WHERE queue = :queue "
            "ORDER BY next_at, jid LIMIT :count OFFSET :offset",
            {**page, "queue": command.queue},
        )
        return [row[0] for row in found]
    else:
        where = "queue = :queue AND " + _LISTINGS[command.state]
        page["queue"] = command.queue
    found = conn.execute(f"SELECT jid FROM jobs WHERE {where} LIMIT :count OFFSET :offset", page)
    return [row[0] for row in found]


def set_paused(conn: sqlite3.Connection, command: checks.Queues, paused: bool) -> None:
    conn.executemany(
        "INSERT INTO queues (name, created, paused) VALUES (?, ?, ?) "
        "ON CONFLICT(name) DO UPDATE SET paused = excluded.paused",
        [(queue, command.now, int(paused)) for queue in command.queues],
    )


def forget(conn: sqlite3.Connection, queues: list[str]) -> None:
    conn.executemany("DELETE FROM queues WHERE name = ?", [(q,) for q in queues])


def failed_groups(conn: sqlite3.Connection) -> dict[str, int]:
    # Kept by the triggers: count(*) over the failed index walked every failed job.
    found = conn.execute(
        "SELECT failure_group, jobs FROM failure_counts WHERE jobs > 0 ORDER BY failure_group"
    )
    return dict(found.fetchall())


def failed(conn: sqlite3.Connection, command: checks.Page) -> JobPage:
    (total,) = conn.execute(
        "SELECT coalesce((SELECT jobs FROM failure_counts WHERE failure_group = ?), 0)",
        (command.key,),
    ).fetchone()
    found = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'failed' AND failure_group = ? "
        "ORDER BY finished_at DESC, seq DESC LIMIT ? OFFSET ?",
        (command.key, command.limit, command.offset),
    ).fetchall()
    return JobPage(total=int(total), jobs=tuple(rows.jobs(conn, found)))


def unfail(conn: sqlite3.Connection, command: checks.Unfail) -> int:
    """Put the oldest jobs of a failure group into a queue; return how many moved."""
    oldest = conn.execute(
        "SELECT jid, klass, data FROM jobs WHERE state = 'failed' AND failure_group = ? "
        "ORDER BY finished_at, seq LIMIT ?",
        (command.group, command.limit),
    ).fetchall()
    moved = [NewJob(command.queue, jid, klass, data) for jid, klass, data in oldest]
    if moved:
        put.store(conn, moved, command.now, settings.read_all(conn), announce="")
    return len(moved)

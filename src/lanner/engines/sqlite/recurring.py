"""Recurring jobs in the SQLite engine: templates, the runs they spawn, and their schedule.

A template row (`recurring`) spawns job `<jid>-<n>` into its queue for each run due at a
pop of that queue (`spawn_due`), put at the time the run was due.
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Final

from lanner import checks
from lanner.engines.sqlite import put, settings
from lanner.engines.sqlite.rows import json_list
from lanner.errors import JobNotFound
from lanner.records import NewJob, RecurringJob

MAX_RUNS_PER_POP: Final = 1000
"""Bounds the work of one pop after a long outage; the rest spawn on the next pops."""


def due_runs(
    next_at: float, interval: float, backlog: int, now: float
) -> tuple[list[float], float]:
    """The times of the runs due at `now`, and when the run after them is due.

    With `backlog > 0`, of the runs due strictly before `now` only the latest `backlog`
    are kept; the older ones are skipped.
    """
    if next_at > now:
        return [], next_at
    if backlog > 0:
        overdue = math.ceil((now - next_at) / interval)
        if overdue > backlog:
            next_at += (overdue - backlog) * interval
    runs: list[float] = []
    while next_at <= now and len(runs) < MAX_RUNS_PER_POP:
        runs.append(next_at)
        next_at += interval
    return runs, next_at


def spawn_due(conn: sqlite3.Connection, config: settings.Config, queue: str, now: float) -> None:
    """Put a job for every due run of the queue's recurring templates."""
    templates = conn.execute(
        "SELECT jid, klass, data, priority, tags, retries, interval, next_at, count, backlog "
        "FROM recurring WHERE queue = ? AND next_at <= ? ORDER BY next_at",
        (queue, now),
    ).fetchall()
    for jid, klass, data, priority, tags, retries, every, next_at, count, backlog in templates:
        runs, next_at = due_runs(next_at, every, backlog, now)
        spawned = [
            NewJob(queue, f"{jid}-{count + n}", klass, data, 0.0, priority, json.loads(tags),
                   retries)
            for n in range(1, len(runs) + 1)
        ]  # fmt: skip
        if spawned:
            put.store(conn, spawned, now, config, put_at=runs, spawned_from=jid)
        conn.execute(
            "UPDATE recurring SET count = ?, next_at = ? WHERE jid = ?",
            (count + len(runs), next_at, jid),
        )


def recur(conn: sqlite3.Connection, command: checks.Recur) -> None:
    """Create a template, or replace one (keeping its spawn count)."""
    next_at = command.now + command.offset
    conn.execute(
        "INSERT INTO recurring (jid, klass, queue, data, priority, tags, retries, "
        "interval, next_at, count, backlog) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?) "
        "ON CONFLICT(jid) DO UPDATE SET klass = excluded.klass, queue = excluded.queue, "
        "data = excluded.data, priority = excluded.priority, tags = excluded.tags, "
        "retries = excluded.retries, interval = excluded.interval, "
        "next_at = excluded.next_at, backlog = excluded.backlog",
        (
            command.jid, command.klass, command.queue, command.data, command.priority,
            json_list(command.tags), command.retries, command.interval, next_at,
            command.backlog,
        ),
    )  # fmt: skip
    put.register_queues(conn, [command.queue], next_at)


def unrecur(conn: sqlite3.Connection, jid: str) -> None:
    conn.execute("DELETE FROM recurring WHERE jid = ?", (jid,))


def get(conn: sqlite3.Connection, jid: str) -> RecurringJob | None:
    row = conn.execute(
        "SELECT jid, klass, queue, data, priority, tags, retries, interval, count, backlog "
        "FROM recurring WHERE jid = ?",
        (jid,),
    ).fetchone()
    if row is None:
        return None
    jid, klass, queue, data, priority, tags, retries, every, count, backlog = row
    return RecurringJob(
        jid, klass, queue, data, priority, tuple(json.loads(tags)), retries, every, count,
        backlog,
    )  # fmt: skip


def update(conn: sqlite3.Connection, command: checks.RecurUpdate) -> None:
    jid, changes = command.jid, command.changes
    if conn.execute("SELECT 1 FROM recurring WHERE jid = ?", (jid,)).fetchone() is None:
        raise JobNotFound(jid, "recur_update")
    if "interval" in changes:
        # The next run keeps its distance from the last one, at the new interval.
        conn.execute(
            "UPDATE recurring SET next_at = next_at - interval + ? WHERE jid = ?",
            (changes["interval"], jid),
        )
    for key, value in changes.items():
        # `key` is one of checks.RECUR_FIELDS, never other caller text.
        conn.execute(f"UPDATE recurring SET {key} = ? WHERE jid = ?", (value, jid))
    if "queue" in changes:
        put.register_queues(conn, [str(changes["queue"])], command.now)


def retag(conn: sqlite3.Connection, command: checks.Retag, *, add: bool) -> list[str]:
    row = conn.execute("SELECT tags FROM recurring WHERE jid = ?", (command.jid,)).fetchone()
    if row is None:
        raise JobNotFound(command.jid, "recur_tag" if add else "recur_untag")
    current: list[str] = json.loads(row[0])
    if add:
        result = list(dict.fromkeys(current + command.tags))
    else:
        result = [tag for tag in current if tag not in command.tags]
    conn.execute("UPDATE recurring SET tags = ? WHERE jid = ?", (json_list(result), command.jid))
    return result

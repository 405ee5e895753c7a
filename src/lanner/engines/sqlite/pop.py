"""Taking work from a queue of the SQLite engine: pop's transaction, and what peek shows.

A pop, in order: a fanout child registers with its parent; nothing from a paused queue; at
most `<queue>-max-concurrency` running; expired locks first (qless's grace period, then a
retry spent), then jobs `timeout` stalled, then due recurring runs and scheduled jobs join
the waiting ones, the expired among those are dropped (LIMITS), and the rest are taken by
priority, readiness and insertion order (FLOW: those their flow lets run,
flow.py). `has_work` and `next_due` let a blocked pop wait
without writing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from lanner.engines.sqlite import (
    eventlog,
    fanout,
    flow,
    jobs,
    limits,
    recurring,
    rows,
    settings,
    stats,
)
from lanner.engines.sqlite.rows import APPEND_HISTORY, JOB_COLUMNS, event, json_list
from lanner.job import Job


def take(conn: sqlite3.Connection, queue: str, worker: str, count: int, now: float) -> list[Job]:
    """Lock up to `count` jobs of `queue` for `worker` (one pop's transaction)."""
    if "+" in queue:
        fanout.register(conn, queue)
    row = conn.execute("SELECT paused FROM queues WHERE name = ?", (queue,)).fetchone()
    if row is not None and row[0]:
        return []
    config = settings.read_all(conn)
    # Refreshed at most once a second: an idle worker's empty pops must not write,
    # or each commit would wake every other blocked worker (see the blocking pop).
    conn.execute(
        "INSERT INTO workers (name, last_seen) VALUES (?, ?) ON CONFLICT(name) "
        "DO UPDATE SET last_seen = excluded.last_seen "
        "WHERE excluded.last_seen >= last_seen + 1",
        (worker, now),
    )
    limit = concurrency_room(conn, config, queue, count, now)
    if limit <= 0:
        return []
    lock = {
        "worker": worker,
        "expires": now + settings.heartbeat(config, queue),
        "event": event("popped", now, worker=worker),
        "cap": settings.history_cap(config),
        "now": now,
    }
    handed_over = _expire_locks(conn, config, queue, limit, now)
    stalled = [
        row[0]
        for row in conn.execute(
            "SELECT jid FROM jobs WHERE queue = ? AND state = 'stalled' ORDER BY seq LIMIT ?",
            (queue, limit - len(handed_over)),
        )
    ]
    taken = _lock_jids(conn, handed_over + stalled, lock)
    if len(taken) < limit:
        recurring.spawn_due(conn, config, queue, now)
        conn.execute(
            "UPDATE jobs SET state = 'waiting' "
            "WHERE queue = ? AND state = 'scheduled' AND ready_at <= ?",
            (queue, now),
        )
        limits.drop_expired(conn, queue, now)
        # Expired jobs left by drop_expired's bound are skipped, never handed out.
        chosen = _WAITING
        if flow.in_use(conn, queue):  # FLOW: its jobs may be held back
            chosen = "SELECT value FROM json_each(:chosen)"
            jids, start = flow.choose(conn, queue, limit - len(taken), now, not taken)
            lock["chosen"] = json_list(jids)
            if start is not None:  # one rate-limited job: when its run may start
                lock["event"] = event("popped", now, worker=worker, start=start[0], by=start[1])
        locked = conn.execute(
            "UPDATE jobs SET state = 'running', worker = :worker, expires = :expires, "
            f"grace = 0, popped_at = :now, history = {APPEND_HISTORY} "
            f"WHERE jid IN ({chosen}) RETURNING {JOB_COLUMNS}, ready_at, seq",
            {**lock, "queue": queue, "n": limit - len(taken)},
        ).fetchall()
        locked.sort(key=lambda row: (-row[4], row[-2], row[-1]))
        stats.record_timings(conn, "wait", queue, now, [now - row[-2] for row in locked])
        taken.extend(rows.jobs(conn, [row[:-2] for row in locked]))
    if eventlog.listening():
        for job in taken:
            if job.tracked:
                eventlog.emit("popped", job.jid)
    return taken


_WAITING = (
    "SELECT jid FROM jobs WHERE queue = :queue AND state = 'waiting' "
    "AND (expires_at IS NULL OR expires_at > :now) "
    "ORDER BY priority DESC, ready_at, seq LIMIT :n"
)


def concurrency_room(
    conn: sqlite3.Connection, config: settings.Config, queue: str, count: int, now: float
) -> int:
    """How many of `count` jobs `<queue>-max-concurrency` lets a pop take now."""
    maximum = int(settings.number(config, f"{queue}-max-concurrency"))
    if maximum <= 0:
        return count
    # Expired locks do not count: their jobs are about to be handed over, and a dead
    # worker must not hold the queue's capacity forever.
    (running,) = conn.execute(
        "SELECT count(*) FROM jobs WHERE queue = ? AND state = 'running' AND expires > ?",
        (queue, now),
    ).fetchone()
    return min(count, maximum - int(running))


def _expire_locks(
    conn: sqlite3.Connection, config: settings.Config, queue: str, limit: int, now: float
) -> list[str]:
    """Apply qless's lock-loss rules to expired locks; return the jids to hand over.

    A lock seen expired for the first time is extended by the grace period (its worker
    may still finish); one expired again after its grace costs a retry and moves on.
    """
    grace_period = settings.number(config, "grace-period")
    cap = settings.history_cap(config)
    expired = {"queue": queue, "now": now, "cap": cap, "event": event("timed-out", now)}
    noticed = conn.execute(
        f"UPDATE jobs SET history = {APPEND_HISTORY}, grace = 1, "
        "expires = CASE WHEN :grace > 0 THEN :now + :grace ELSE expires END "
        "WHERE queue = :queue AND state = 'running' AND expires <= :now AND grace = 0 "
        "RETURNING jid, worker, tracked, expires",
        {**expired, "grace": grace_period},
    ).fetchall()
    stats.count(conn, "retries", [(queue, now)] * len(noticed))
    for jid, holder, tracked, _ in sorted(noticed, key=lambda row: row[3]):
        if tracked:  # qless tells the loss to the worker, and to those tracking the job
            eventlog.emit("stalled", jid)
        eventlog.emit("lock_lost", jid, worker=holder)
    lost = conn.execute(
        "UPDATE jobs SET remaining = remaining - 1 WHERE jid IN (SELECT jid FROM jobs "
        "  WHERE queue = :queue AND state = 'running' AND expires <= :now "
        "  ORDER BY expires LIMIT :limit) "
        "RETURNING jid, remaining, expires, worker",
        {**expired, "limit": limit},
    ).fetchall()
    handed_over = []
    for jid, remaining, _, holder in sorted(lost, key=lambda row: row[2]):
        if remaining < 0:
            group = f"failed-retries-{queue}"
            message = f'Job exhausted retries in queue "{queue}"'
            jobs.fail_job(conn, jid, group, message, "", now, cap)
            eventlog.emit(
                "failed", jid, worker=holder, details={"group": group, "message": message}
            )
        else:
            handed_over.append(jid)
    return handed_over


def _lock_jids(conn: sqlite3.Connection, jids: list[str], lock: Mapping[str, object]) -> list[Job]:
    if not jids:
        return []
    locked = conn.execute(
        "UPDATE jobs SET state = 'running', worker = :worker, expires = :expires, "
        f"grace = 0, popped_at = :now, history = {APPEND_HISTORY} "
        f"WHERE jid IN (SELECT value FROM json_each(:jids)) RETURNING {JOB_COLUMNS}",
        {**lock, "jids": json_list(jids)},
    ).fetchall()
    order = {jid: index for index, jid in enumerate(jids)}
    locked.sort(key=lambda row: order[row[0]])
    return rows.jobs(conn, locked)


def has_work(conn: sqlite3.Connection, queue: str, now: float) -> bool:
    """Whether a pop of `queue` at `now` would take or change anything (a read only)."""
    paused = conn.execute("SELECT paused FROM queues WHERE name = ?", (queue,)).fetchone()
    if paused is not None and paused[0]:
        return False
    if concurrency_room(conn, settings.read_all(conn), queue, 1, now) <= 0:
        return False
    (found,) = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'waiting') "
        "  AND NOT EXISTS (SELECT 1 FROM flow_jobs WHERE queue = :q) "
        "OR EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'stalled') "
        "OR EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'scheduled' "
        "  AND ready_at <= :now) "
        "OR EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'running' "
        "  AND expires <= :now) "
        "OR EXISTS (SELECT 1 FROM recurring WHERE queue = :q AND next_at <= :now)",
        {"q": queue, "now": now},
    ).fetchone()
    return bool(found) or (flow.in_use(conn, queue) and flow.has_ready(conn, queue, now))


def next_due(conn: sqlite3.Connection, queue: str) -> float:
    """When the queue's earliest scheduled job, lock or recurring run falls due (inf: never)."""
    row = conn.execute(
        "SELECT (SELECT min(ready_at) FROM jobs WHERE queue = :q AND state = 'scheduled'), "
        "       (SELECT min(expires) FROM jobs WHERE queue = :q AND state = 'running'), "
        "       (SELECT min(next_at) FROM recurring WHERE queue = :q)",
        {"q": queue},
    ).fetchone()
    return min((value for value in row if value is not None), default=float("inf"))


def peek(conn: sqlite3.Connection, queue: str, count: int, now: float) -> list[Job]:
    """The jobs a pop would take next, in its order, without changing anything (expired
    waiting jobs are skipped, left for a pop to drop).

    Each kind of candidate gives its first `count` in its own index's order (locks run
    out, stalled, waiting, scheduled and due), and only those are sorted together: a long
    queue is not sorted whole to show its head.
    """
    found = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM ("
        "  SELECT * FROM (SELECT *, 0 AS rank FROM jobs WHERE queue = :q "
        "    AND state = 'running' AND expires <= :now ORDER BY expires LIMIT :n)"
        "  UNION ALL SELECT * FROM (SELECT *, 1 FROM jobs WHERE queue = :q "
        "    AND state = 'stalled' ORDER BY ready_at, seq LIMIT :n)"
        "  UNION ALL SELECT * FROM (SELECT *, 2 FROM jobs WHERE queue = :q "
        "    AND state = 'waiting' AND (expires_at IS NULL OR expires_at > :now) "
        "    ORDER BY priority DESC, ready_at, seq LIMIT :n)"
        "  UNION ALL SELECT * FROM (SELECT *, 2 FROM jobs WHERE queue = :q "
        "    AND state = 'scheduled' AND ready_at <= :now "
        "    AND (expires_at IS NULL OR expires_at > :now) "
        "    ORDER BY priority DESC, ready_at, seq LIMIT :n)"
        ") ORDER BY rank, CASE rank WHEN 0 THEN expires ELSE 0 END, "
        "  CASE rank WHEN 2 THEN -priority ELSE 0 END, ready_at, seq LIMIT :n",
        {"q": queue, "now": now, "n": count},
    ).fetchall()
    return rows.jobs(conn, found)

"""Putting jobs into the SQLite engine: new jobs, and existing ones moved (qless's put).

One function, `store`, is the body of put, requeue, put_many, complete's advance to
another queue, unfail and the runs recurring templates spawn: a list of steps, each a
function below it. What a put may add to a
bounded queue is decided before (`limits.admit`), and its fanout copies made (`fanout`),
by the engine's put alone; every store caps the jobs' expiry by their queue's max-age.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping, Sequence, Set
from typing import Any, Final, NamedTuple

from lanner.engines.sqlite import eventlog, settings, stats
from lanner.engines.sqlite.rows import APPEND_HISTORY, json_list, put_event
from lanner.errors import InvalidState
from lanner.job import JobState
from lanner.records import DEFAULT_RETRIES, NewJob


def store(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    now: float,
    config: settings.Config,
    *,
    put_at: Sequence[float] | None = None,
    spawned_from: str | None = None,
    announce: str | None = None,
) -> None:
    """Insert or move checked `jobs`; `put_at[i]` is when job i counts as put (default: now).

    On a move, a job's priority, tags, retries and dependencies given as None are kept. A
    job's `if_exists` may keep a live job of its jid instead, or refuse to move a running
    one (`InvalidState`, nothing stored). EVENTS: `announce` (the putting worker's name,
    maybe '') makes a `put` event per job, and `lock_lost` for a running job moved from
    another worker, as qless's put does (an advance, or a recurring run, makes none).

    The steps, each below: what is there already; the jobs kept out (`if_exists`); the
    failed ones moved out of the failed counts; the dependencies still open; the rows;
    the queues' counts; the upsert; the dependency and tag rows; the queues made known;
    the events.
    """
    found = _existing(conn, jobs)
    if any(job.if_exists != "move" for job in jobs):  # never so for recurring runs (put_at)
        jobs = _not_kept(jobs, {jid: state for jid, (state, _, _) in found.states.items()})
        if not jobs:
            return
    stored = {job.jid for job in jobs}
    if found.states:  # most puts are of new jids: nothing failed to uncount
        stats.uncount_failed(conn, found.failed_among(stored))
    rows = _rows(
        conn,
        jobs,
        found,
        _open_dependencies(conn, jobs, stored),
        [now] * len(jobs) if put_at is None else put_at,
        config,
        spawned_from,
    )
    # Counted first: the triggers of a job's later move within this put then find its
    # queue's row.
    _count_puts(conn, jobs, rows, found.old.keys())
    _upsert(conn, rows)
    _store_links(conn, jobs, rows, found.old.keys(), now)
    queues = [jobs[0].queue] if len(jobs) == 1 else sorted({job.queue for job in jobs})
    register_queues(conn, queues, now)
    if announce is not None and eventlog.listening():
        _announce(jobs, found.holders, announce)


class _Existing(NamedTuple):
    """What the store holds already of the jids put."""

    old: dict[str, tuple[Any, ...]]  # jid -> (priority, tags, retries)
    states: dict[str, tuple[str, str, float]]  # jid -> (state, queue, finished_at)
    holders: dict[str, str]  # jid of a running job -> its worker
    kept_deps: dict[str, int]  # jid -> its dependencies left

    def failed_among(self, jids: Set[str]) -> list[tuple[str, float]]:
        """(queue, finished_at) of the failed jobs among `jids`: moved out of failure."""
        return [
            (queue, finished_at)
            for jid, (state, queue, finished_at) in self.states.items()
            if state == JobState.FAILED and jid in jids
        ]


def _existing(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> _Existing:
    # One jid (a single put, the most common): compared as is, no JSON array made or read.
    where, jids = (
        ("= ?", jobs[0].jid) if len(jobs) == 1 else (_IN_JSON, json_list([job.jid for job in jobs]))
    )
    found = _Existing({}, {}, {}, {})
    for jid, priority, tags, retries, state, queue, finished_at, holder in conn.execute(
        "SELECT jid, priority, tags, retries, state, queue, finished_at, worker FROM jobs "
        f"WHERE jid {where}",  # one of two literals
        (jids,),
    ):
        found.old[jid] = (priority, tags, retries)
        found.states[jid] = (state, queue, finished_at)
        if state == JobState.RUNNING:
            found.holders[jid] = holder
    if found.old:  # a new jid has no dependency rows: no statement for most puts
        found.kept_deps.update(
            conn.execute(
                f"SELECT jid, count(*) FROM dependencies WHERE jid {where} GROUP BY jid",
                (jids,),
            ).fetchall()
        )
    return found


_IN_JSON: Final = "IN (SELECT value FROM json_each(?))"


def _open_dependencies(
    conn: sqlite3.Connection, jobs: Sequence[NewJob], stored: set[str]
) -> set[str]:
    """The dependencies named by `jobs` that are not complete (none asked: no statement)."""
    wanted = sorted({dep for job in jobs for dep in job.depends or ()})
    if not wanted:
        return set()
    open_deps = {
        row[0]
        for row in conn.execute(
            "SELECT jid FROM jobs WHERE jid IN (SELECT value FROM json_each(?)) "
            "AND state != 'complete'",
            (json_list(wanted),),
        )
    }
    # A job put in this same call is not complete either (a workflow's put_many).
    open_deps.update(stored.intersection(wanted))
    return open_deps


def _rows(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    found: _Existing,
    open_deps: set[str],
    put_at: Sequence[float],
    config: settings.Config,
    spawned_from: str | None,
) -> list[dict[str, Any]]:
    """The upsert's parameters of each job, in insertion order (`seq` taken here)."""
    first_seq = take_seq(conn, len(jobs))
    cap = settings.history_cap(config)
    ages = {queue: max_age(config, queue) for queue in {job.queue for job in jobs}}
    return [
        _job_row(job, found.old.get(job.jid), found.kept_deps, open_deps, at, cap, ages[job.queue])
        | {"seq": first_seq + offset, "spawned_from": spawned_from, "size": utf8_size(job.data)}
        for offset, (job, at) in enumerate(zip(jobs, put_at, strict=True))
    ]


def _upsert(conn: sqlite3.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert the new jobs; a moved one's row is reset (its history appended to)."""
    conn.executemany(
        "INSERT INTO jobs (jid, klass, queue, data, priority, tags, state, seq, ready_at, "
        "retries, remaining, worker, expires, grace, tracked, spawned_from_jid, history, "
        "expires_at, size) "
        "VALUES (:jid, :klass, :queue, :data, :priority, :tags, :state, :seq, :ready_at, "
        ":retries, :retries, '', 0, 0, 0, :spawned_from, '[' || :event || ']', "
        "NULLIF(:expires_at, 9e999), :size) "
        "ON CONFLICT(jid) DO UPDATE SET klass = excluded.klass, queue = excluded.queue, "
        "data = excluded.data, priority = excluded.priority, tags = excluded.tags, "
        "state = excluded.state, seq = excluded.seq, ready_at = excluded.ready_at, "
        "retries = excluded.retries, remaining = excluded.retries, worker = '', "
        "expires = 0, grace = 0, failure = NULL, failure_group = NULL, result = NULL, "
        "expires_at = excluded.expires_at, size = excluded.size, "
        f"finished_at = NULL, history = {APPEND_HISTORY}",
        rows,
    )


def _announce(jobs: Sequence[NewJob], holders: dict[str, str], announce: str) -> None:
    """EVENTS: `put` for each job; `lock_lost` for one moved from another running worker."""
    for job in jobs:
        eventlog.emit("put", job.jid, job.queue)
        holder = holders.pop(job.jid, announce)
        if holder != announce:
            eventlog.emit("lock_lost", job.jid, worker=holder)


def _store_links(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    rows: Sequence[Mapping[str, Any]],
    existing: Set[str],
    now: float,
) -> None:
    """The stored jobs' dependency and tag rows (a moved job's replaced when given)."""
    # Each statement only when it has rows: an executemany of none still looks its
    # statement up and steps it (about a microsecond each; most puts have none of these).
    if replaced := [(job.jid,) for job in jobs if job.depends is not None and job.jid in existing]:
        conn.executemany("DELETE FROM dependencies WHERE jid = ?", replaced)
    if depending := [(row["jid"], dep) for row in rows for dep in row["new_dependencies"]]:
        conn.executemany("INSERT INTO dependencies VALUES (?, ?)", depending)
    if retagged := [(job.jid,) for job in jobs if job.tags is not None and job.jid in existing]:
        conn.executemany("DELETE FROM tags WHERE jid = ?", retagged)
    if tagged := [(tag, row["jid"], now) for row in rows for tag in row["new_tags"]]:
        conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?, ?)", tagged)


def _job_row(
    job: NewJob,
    old: tuple[Any, ...] | None,
    kept_deps: Mapping[str, int],
    open_deps: set[str],
    at: float,
    cap: int,
    age: float,
) -> dict[str, Any]:
    """The parameters of one job's upsert, plus the dependency and tag rows it needs.

    `old` is the (priority, tags, retries) of the job being moved, None for a new job;
    `age` its queue's max-age (0: none).
    """
    priority = job.priority if job.priority is not None else (old[0] if old else 0)
    retries = job.retries if job.retries is not None else (old[2] if old else DEFAULT_RETRIES)
    tags = job.tags if job.tags is not None else (json.loads(old[1]) if old else [])
    if job.depends is None:
        new_dependencies = []
        blocked = kept_deps.get(job.jid, 0) > 0
    else:
        new_dependencies = [d for d in job.depends if d in open_deps and d != job.jid]
        blocked = bool(new_dependencies)
    if blocked:
        state = JobState.DEPENDS
    elif job.delay > 0:
        state = JobState.SCHEDULED
    else:
        state = JobState.WAITING
    return {
        "jid": job.jid,
        "klass": job.klass,
        "queue": job.queue,
        "data": job.data,
        "priority": priority,
        "tags": json_list(tags),
        "state": state.value,
        "ready_at": at + job.delay,
        "retries": retries,
        # Never None: the sqlite3 module binds None only after failing to adapt it (an
        # AttributeError made and dropped, about a microsecond per job); SQL makes the
        # infinity NULL (never expires).
        "expires_at": expiry(job.expires_at, age, at) if age else _never(job.expires_at),
        "event": put_event(job.queue, at),
        "cap": cap,
        # Not SQL parameters: what the caller stores beside the job row.
        "new_dependencies": new_dependencies,
        "new_tags": tags if job.tags is not None or old is None else [],
    }


def max_age(config: settings.Config, queue: str) -> float:
    """LIMITS: `<queue>-max-age` in seconds (0: none)."""
    # A number: config_set checked it (checks.limit_value).
    return float(config.get(f"{queue}-max-age") or 0)


def utf8_size(data: str) -> int:
    """The bytes of `data` in UTF-8, as `jobs.size` and the max-*-size bounds count them."""
    return len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass"))


def _never(expires_at: float | None) -> float:
    return math.inf if expires_at is None else expires_at


def expiry(expires_at: float | None, age: float, put_at: float) -> float:
    """A job's `expires_at` as stored: the one given, capped by its queue's max-age > 0."""
    return put_at + age if expires_at is None else min(expires_at, put_at + age)


def _count_puts(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    rows: Sequence[Mapping[str, Any]],
    existing: Set[str],
) -> None:
    """Count the stored jobs into their queues' usage: every put into `total_items`, the
    new jobs into `items` and `bytes`, and into `scheduled` or `depends` by their state (a
    moved job is counted by the triggers on `jobs`).

    One row update per queue and put: a trigger on INSERT would cost one per job.
    """
    added: dict[str, list[int]] = {}  # queue -> [items, bytes, total_items, scheduled, depends]
    inserted = set(existing)
    for job, row in zip(jobs, rows, strict=True):
        counts = added.get(job.queue)
        if counts is None:
            counts = added[job.queue] = [0, 0, 0, 0, 0]
        if job.jid not in inserted:  # a jid twice in one put_many: its second is a move
            inserted.add(job.jid)
            counts[0] += 1
            counts[1] += row["size"]
            state = row["state"]
            if state != "waiting":
                counts[3 if state == "scheduled" else 4] += 1
        counts[2] += 1
    conn.executemany(
        "INSERT INTO queue_usage (queue, items, bytes, total_items, scheduled, depends) "
        "VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(queue) DO UPDATE SET items = items + excluded.items, "
        "bytes = bytes + excluded.bytes, total_items = total_items + excluded.total_items, "
        "scheduled = scheduled + excluded.scheduled, depends = depends + excluded.depends",
        [(queue, *counts) for queue, counts in added.items()],
    )


_LIVE: Final = frozenset({"waiting", "scheduled", "depends", "running", "stalled"})


def _not_kept(jobs: Sequence[NewJob], states: Mapping[str, str]) -> list[NewJob]:
    """The jobs to store, their `if_exists` applied to the jobs of the same jid."""
    stored = []
    for job in jobs:
        state = states.get(job.jid)
        if (job.if_exists == "keep" and state in _LIVE) or (job.if_exists == "once" and state):
            continue
        if job.if_exists == "keep-waiting" and state in ("waiting", "scheduled", "depends"):
            continue
        if job.if_exists in ("move-unless-running", "keep-waiting") and state in (
            "running",
            "stalled",
        ):
            raise InvalidState(
                f"put(): job {job.jid} is running; it is not moved (if_exists={job.if_exists})"
            )
        stored.append(job)
    return stored


def take_seq(conn: sqlite3.Connection, count: int) -> int:
    """Reserve `count` numbers of the insertion order; return the first."""
    (last,) = conn.execute(
        "UPDATE counters SET value = value + ? WHERE name = 'seq' RETURNING value", (count,)
    ).fetchone()
    return int(last) - count + 1


def register_queues(conn: sqlite3.Connection, queues: Sequence[str], now: float) -> None:
    """Make queues known (to `queues()`), as a put or a recurring template does."""
    conn.executemany(
        "INSERT OR IGNORE INTO queues (name, created) VALUES (?, ?)",
        [(queue, now) for queue in queues],
    )

"""How the SQLite engine's job rows become `Job`s, and the SQL pieces every command shares.

A job's history is a JSON array in its row; `APPEND_HISTORY` appends one event in SQL,
so no command reads the history to extend it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from lanner.job import Failure, Job, JobState
from lanner.records import JobOutcome

JOB_COLUMNS: Final = (
    "jid, klass, queue, data, priority, tags, state, retries, remaining, worker, expires, "
    "failure, spawned_from_jid, tracked, history, result, ready_at"
)
"""What `jobs()` builds a Job from, in order."""

APPEND_HISTORY: Final = (
    "CASE WHEN json_array_length(history) >= :cap "
    "THEN json_insert(json_remove(history, '$[1]'), '$[#]', json(:event)) "
    "ELSE json_insert(history, '$[#]', json(:event)) END"
)
"""Appends the event :event to a job's history, dropping the second entry once :cap is
reached so that the first (the original put) is always kept."""

_STATES: Final = {state.value: state for state in JobState}
_READY_STATES: Final = ("waiting", "scheduled")


def event(what: str, when: float, **details: object) -> str:
    """One history entry as JSON text."""
    return json.dumps({"what": what, "when": when, **details}, separators=(",", ":"))


def put_event(queue: str, now: float) -> str:
    # The hottest event: queue names need no JSON escaping (names.queue_name) and `now` is
    # finite, so plain formatting gives the same text as `event`, several times faster.
    return f'{{"what":"put","when":{now!r},"q":"{queue}"}}'


def json_list(values: Sequence[str]) -> str:
    """A JSON array of strings, for `json_each(?)` parameters and the `tags` column."""
    return _LIST.encode(list(values)) if values else "[]"


# One encoder: `json.dumps` with options builds a new one per call (two a put).
_LIST: Final = json.JSONEncoder(separators=(",", ":"))


def jobs(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[Job]:
    """Build jobs from rows of JOB_COLUMNS, with their dependencies and dependents."""
    if not rows:
        return []
    jids = json_list([row[0] for row in rows])
    dependencies: dict[str, list[str]] = {}
    dependents: dict[str, list[str]] = {}
    for jid, on_jid in conn.execute(
        "SELECT jid, on_jid FROM dependencies WHERE jid IN (SELECT value FROM json_each(:j)) "
        "UNION SELECT jid, on_jid FROM dependencies "
        "WHERE on_jid IN (SELECT value FROM json_each(:j)) ORDER BY 1, 2",
        {"j": jids},
    ):
        dependencies.setdefault(jid, []).append(on_jid)
        dependents.setdefault(on_jid, []).append(jid)
    built = []
    for row in rows:
        (jid, klass, queue, data, priority, tags, state, retries, remaining, worker,
         expires, failure, spawned_from, tracked, history, result, ready_at) = row  # fmt: skip
        built.append(
            Job(
                jid=jid,
                klass=klass,
                queue=queue,
                data=data,
                priority=priority,
                tags=() if tags == "[]" else tuple(json.loads(tags)),
                state=_STATES[state],
                retries=retries,
                remaining=remaining,
                worker=worker,
                expires=expires,
                failure=Failure(**json.loads(failure)) if failure else None,
                dependencies=tuple(dependencies.get(jid, ())),
                dependents=tuple(dependents.get(jid, ())),
                spawned_from_jid=spawned_from,
                tracked=bool(tracked),
                history_json=history,
                result=result,
                due=ready_at if state in _READY_STATES else None,
            )
        )
    return built


def outcomes(conn: sqlite3.Connection, jids: Sequence[str]) -> list[JobOutcome]:
    """The state, result and failure of the jobs that exist among `jids`, in the order
    asked."""
    found = {
        jid: JobOutcome(
            jid, _STATES[state], result, Failure(**json.loads(failure)) if failure else None
        )
        for jid, state, result, failure in conn.execute(
            "SELECT jid, state, result, failure FROM jobs "
            "WHERE jid IN (SELECT value FROM json_each(?))",
            (json_list(jids),),
        )
    }
    return [found[jid] for jid in jids if jid in found]


def multiget(conn: sqlite3.Connection, jids: Sequence[str]) -> list[Job]:
    """The jobs that exist among `jids`, in the order asked."""
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE jid IN (SELECT value FROM json_each(?))",
        (json_list(jids),),
    ).fetchall()
    found = {job.jid: job for job in jobs(conn, rows)}
    return [found[jid] for jid in jids if jid in found]

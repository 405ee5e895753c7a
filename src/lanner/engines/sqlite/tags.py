"""What the SQLite engine lets a caller attach to a job: tags, tracking, history entries.

A job's tags live twice: as a JSON list in its row (returned with the job) and as rows of
`tags` (tag, jid, added), which `tagged` and `tags_top` read through their index.
"""

from __future__ import annotations

import json
import sqlite3

from lanner import checks
from lanner.engines.sqlite import eventlog, rows, settings
from lanner.engines.sqlite.rows import APPEND_HISTORY, JOB_COLUMNS, event, json_list
from lanner.errors import JobNotFound
from lanner.job import PROGRESS_ENTRY, Job
from lanner.records import JobPage


def retag(conn: sqlite3.Connection, command: checks.Retag, *, add: bool) -> list[str]:
    """Add or remove tags; return the job's tags."""
    jid, tags = command.jid, command.tags
    row = conn.execute("SELECT tags FROM jobs WHERE jid = ?", (jid,)).fetchone()
    if row is None:
        raise JobNotFound(jid, "tag_add" if add else "tag_remove")
    current: list[str] = json.loads(row[0])
    if add:
        result = list(dict.fromkeys(current + tags))
        conn.executemany(
            "INSERT OR IGNORE INTO tags VALUES (?, ?, ?)", [(t, jid, command.now) for t in tags]
        )
    else:
        result = [tag for tag in current if tag not in tags]
        conn.executemany("DELETE FROM tags WHERE tag = ? AND jid = ?", [(t, jid) for t in tags])
    conn.execute("UPDATE jobs SET tags = ? WHERE jid = ?", (json_list(result), jid))
    return result


def tagged(conn: sqlite3.Connection, command: checks.Page) -> JobPage:
    (total,) = conn.execute("SELECT count(*) FROM tags WHERE tag = ?", (command.key,)).fetchone()
    found = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs JOIN tags USING (jid) WHERE tags.tag = ? "
        "ORDER BY tags.added, jobs.seq LIMIT ? OFFSET ?",
        (command.key, command.limit, command.offset),
    ).fetchall()
    return JobPage(total=int(total), jobs=tuple(rows.jobs(conn, found)))


def top(conn: sqlite3.Connection, command: checks.Page) -> list[str]:
    found = conn.execute(
        "SELECT tag FROM tags GROUP BY tag HAVING count(*) >= 2 "
        "ORDER BY count(*) DESC, tag LIMIT ? OFFSET ?",
        (command.limit, command.offset),
    )
    return [row[0] for row in found]


def log(conn: sqlite3.Connection, command: checks.Log) -> None:
    """Append a custom entry to a job's history (a progress entry replaces the last entry
    if that is one too, and is announced)."""
    cap = settings.history_cap(settings.read_all(conn))
    entry = event(command.message, command.now, **command.details)
    progress = command.message == PROGRESS_ENTRY
    history = _REPLACE_PROGRESS if progress else APPEND_HISTORY
    found = conn.execute(
        f"UPDATE jobs SET history = {history} WHERE jid = :jid RETURNING queue",
        {"jid": command.jid, "cap": cap, "event": entry},
    ).fetchone()
    if found is None:
        raise JobNotFound(command.jid, "log")
    if progress:
        details = {key: _text(value) for key, value in command.details.items()}
        eventlog.emit("progress", command.jid, found[0], details=details)


_REPLACE_PROGRESS = (
    "CASE WHEN json_array_length(history) > 1 "
    f"AND json_extract(history, '$[#-1].what') = '{PROGRESS_ENTRY}' "
    f"THEN json_replace(history, '$[#-1]', json(:event)) ELSE {APPEND_HISTORY} END"
)


def _text(value: object) -> str:
    """An event detail as text, as the Redis core writes it (numbers as Lua's %.14g)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format(value, ".14g")
    return json.dumps(value)


def set_tracked(conn: sqlite3.Connection, jid: str, tracked: bool) -> None:
    updated = conn.execute(
        "UPDATE jobs SET tracked = ? WHERE jid = ?", (int(tracked), jid)
    ).rowcount
    if not updated:
        raise JobNotFound(jid, "track" if tracked else "untrack")
    eventlog.emit("track" if tracked else "untrack", jid)


def tracked(conn: sqlite3.Connection) -> list[Job]:
    found = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE tracked = 1 ORDER BY seq")
    return rows.jobs(conn, found.fetchall())

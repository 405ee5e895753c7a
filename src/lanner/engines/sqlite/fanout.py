"""FANOUT in the SQLite engine: the children of each queue, and the copies a put makes.

A pop or peek of `parent+child` registers the child in the `fanout` table (in the store,
so every process sees it); `queue_forget` of that name removes it. A put into `parent`
then also puts, in its transaction, a copy of each job into every child: jid
`<jid>+<child>`, without dependencies.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from lanner.checks import names
from lanner.records import NewJob


def register(conn: sqlite3.Connection, queue: str) -> None:
    """Make `queue` a child of its parent, if it is a fanout child."""
    parent = names.fanout_parent(queue)
    if parent is not None:
        conn.execute(
            "INSERT OR IGNORE INTO fanout (parent, child) VALUES (?, ?)",
            (parent, queue[len(parent) + 1 :]),
        )


def forget(conn: sqlite3.Connection, queues: Sequence[str]) -> None:
    """The children among `queues` get no more copies."""
    forgotten = []
    for queue in queues:
        parent = names.fanout_parent(queue)
        if parent is not None:
            forgotten.append((parent, queue[len(parent) + 1 :]))
    conn.executemany("DELETE FROM fanout WHERE parent = ? AND child = ?", forgotten)


def _children(conn: sqlite3.Connection, parent: str) -> list[str]:
    found = conn.execute("SELECT child FROM fanout WHERE parent = ? ORDER BY child", (parent,))
    return [row[0] for row in found]


def copies(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[NewJob]:
    """The copies of `jobs` that the children of their queues get (a child's own jobs,
    put into `parent+child`, are not copied further)."""
    # One lookup per parent (a put has one, mostly): several times cheaper than one
    # statement over a JSON list of them.
    children: dict[str, list[str]] = {}
    for parent in {job.queue for job in jobs}:
        if "+" not in parent and (found := _children(conn, parent)):
            children[parent] = found
    if not children:
        return []
    return [
        job._replace(queue=f"{job.queue}+{child}", jid=f"{job.jid}+{child}", depends=None)
        for job in jobs
        for child in children.get(job.queue, ())
    ]

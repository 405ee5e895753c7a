"""LIMITS in the SQLite engine: a queue's bounds on what a put adds, and its jobs' expiry.

A queue's usage (jobs held, the bytes of their data) is the `queue_usage` row that the
triggers of schema.py keep, so checking a put against `<queue>-max-items` and
`<queue>-max-size` reads one row, never the queue. `admit` decides, before a put stores
anything, which of its jobs go in: it raises for a job the caller put, and drops a fanout
copy that its child queue refuses. A queue that discards old jobs when full drops its
oldest waiting jobs first, then the waiting jobs the put itself made, in put order (as
the Redis engine does): those are stored, then dropped (`drop_own`), so that the queue's
counts show them put and discarded. Expired waiting jobs are dropped by the pops of their
queue (`drop_expired`); put.py caps each job's `expires_at` by its queue's `max-age`.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, Literal, NamedTuple

from lanner.engines.sqlite import jobs as job_rows
from lanner.engines.sqlite import settings
from lanner.engines.sqlite.put import utf8_size
from lanner.engines.sqlite.rows import json_list
from lanner.errors import PayloadTooLarge, QueueFull
from lanner.records import NewJob, QueueUsage

MAX_EXPIRED_PER_POP: Final = 1000
"""Bounds the deletions of one pop; the jobs left expired are skipped, and dropped later."""

_CHUNK: Final = 16
"""Waiting jobs read at a time while choosing which to discard."""

Dropped = Literal["expired", "discarded"]

_HELD: Final = frozenset({"waiting", "scheduled", "depends", "running", "stalled"})


class Bounds(NamedTuple):
    """A queue's bounds on a put (0: none)."""

    items: int
    size: int
    item_size: int
    discard_old: bool


def bounds(config: settings.Config, queue: str) -> Bounds | None:
    """The queue's bounds, or None if it has none (a put then checks nothing)."""
    # Every put asks, so the common answer (none) costs three lookups. The values are
    # whole numbers: config_set checked them (checks.limit_value).
    items = config.get(f"{queue}-max-items")
    size = config.get(f"{queue}-max-size")
    item_size = config.get(f"{queue}-max-item-size")
    if not (items or size or item_size):
        return None
    discard = config.get(f"{queue}-discard-old-when-full")
    return Bounds(int(items or 0), int(size or 0), int(item_size or 0), bool(discard))


class Admitted(NamedTuple):
    """What a put stores (`jobs`), and which of them later ones of it drop (`dropped_own`)."""

    jobs: Sequence[NewJob]
    dropped_own: list[str]


def admit(
    conn: sqlite3.Connection,
    puts: Sequence[NewJob],
    copies: Sequence[NewJob],
    config: settings.Config,
    now: float,
) -> Admitted:
    """The jobs a put stores: all of `puts` and the `copies` their queues take.

    A job over its queue's max-item-size raises `PayloadTooLarge`; one that would take the
    queue past its max-items or max-size drops waiting jobs of the queue if it discards
    old ones (the lowest priority first, the oldest first), else raises `QueueFull`
    (nothing is stored: the caller's transaction rolls back). A fanout copy refused so is
    dropped instead, counted as discarded.
    """
    batch = [*puts, *copies] if copies else puts
    limited = {q: b for q in {job.queue for job in batch} if (b := bounds(config, q))}
    if not limited:
        return Admitted(batch, [])
    admission = _Admission(conn, limited, batch)
    admitted = [job for job in puts if admission.take(job, refuse=True)]
    admitted += [job for job in copies if admission.take(job, refuse=False)]
    job_rows.drop(conn, admission.victims, now, "discarded")
    count_dropped(conn, "discarded", admission.discarded)
    return Admitted(admitted, admission.dropped_own())


def drop_own(conn: sqlite3.Connection, admitted: Admitted, now: float) -> None:
    """Drop the jobs of a put that later jobs of it made room for (once it is stored)."""
    job_rows.drop(conn, admitted.dropped_own, now, "discarded")


class _Place(NamedTuple):
    queue: str
    size: int


class _Admission:
    """The usage of the bounded queues as a put's jobs are admitted one by one."""

    def __init__(
        self, conn: sqlite3.Connection, limited: Mapping[str, Bounds], batch: Sequence[NewJob]
    ) -> None:
        self.conn = conn
        self.limited = limited
        self.batch_jids = {job.jid for job in batch}
        self.usage: dict[str, list[int]] = {}  # queue -> [items, bytes], as admitted so far
        self.places: dict[str, _Place] = {}  # jid -> where the job is held now
        self.states: dict[str, str] = {}  # jid -> state before the put (if_exists)
        for jid, state, queue, size in conn.execute(
            "SELECT jid, state, queue, size FROM jobs "
            "WHERE jid IN (SELECT value FROM json_each(?))",
            (json_list(sorted(self.batch_jids)),),
        ):
            self.states[jid] = state
            if state in _HELD:
                self.places[jid] = _Place(queue, size)
        self.candidates: dict[str, Iterator[tuple[str, int]]] = {}
        self.victims: list[str] = []
        self.discarded: Counter[str] = Counter()
        # The waiting jobs this put makes, by queue in put order (jid, size, which put of
        # the jid: a jid put again has left its earlier place), and how far a discard
        # went through them; those dropped.
        self.made: dict[str, list[tuple[str, int, int]]] = {}
        self.made_from: Counter[str] = Counter()
        self.latest: dict[str, int] = {}
        self.own_victims: list[tuple[str, int]] = []  # (jid, which put of it)

    def take(self, job: NewJob, *, refuse: bool) -> bool:
        """Whether `job` goes in (its usage then counted); raise if `refuse` and it cannot."""
        if job.if_exists == "keep" and self.states.get(job.jid) in _HELD:
            return True  # put.store keeps the live job as it is: nothing added
        queue, size = job.queue, utf8_size(job.data)
        old = self.places.get(job.jid)
        limit = self.limited.get(queue)
        if limit is not None:
            error = self._room(job, limit, size, old)
            if error is not None:
                if refuse:
                    raise error
                self.discarded[queue] += 1
                return False
        if old is not None and old.queue in self.limited:
            self._usage(old.queue)[0] -= 1
            self._usage(old.queue)[1] -= old.size
        serial = self.latest[job.jid] = self.latest.get(job.jid, 0) + 1
        if limit is not None:
            self._usage(queue)[0] += 1
            self._usage(queue)[1] += size
            if limit.discard_old and self._surely_waiting(job):
                self.made.setdefault(queue, []).append((job.jid, size, serial))
        self.places[job.jid] = _Place(queue, size)
        return True

    def dropped_own(self) -> list[str]:
        """The jobs of the put dropped by later ones of it (but those it put once more)."""
        return [jid for jid, serial in self.own_victims if self.latest[jid] == serial]

    def _surely_waiting(self, job: NewJob) -> bool:
        """Whether the put leaves `job` waiting (a later one may then drop it): not
        delayed, and given no dependency, or keeping none (only a job in depends has)."""
        if job.delay > 0:
            return False
        if job.depends is not None:
            return not job.depends
        return self.states.get(job.jid) != "depends"

    def _room(
        self, job: NewJob, limit: Bounds, size: int, old: _Place | None
    ) -> PayloadTooLarge | QueueFull | None:
        """Make room for `job` (choosing victims); return why it cannot go in, if it cannot."""
        if limit.item_size and size > limit.item_size:
            return PayloadTooLarge(
                f"put(): job {job.jid}'s data is {size} bytes, over the max-item-size "
                f"{limit.item_size} of queue {job.queue!r}"
            )
        items, total = self._usage(job.queue)
        moved = old is not None and old.queue == job.queue
        after = [items + 1 - moved, total + size - (old.size if old and moved else 0)]
        # A bound is checked only where the job adds: a move that adds nothing always
        # goes in, even into a queue over a bound lowered since it filled.
        over_items = limit.items and after[0] > max(items, limit.items)
        over_size = limit.size and after[1] > max(total, limit.size)
        if not over_items and not over_size:
            return None
        chosen = self._victims(job, limit, after) if limit.discard_old else None
        if chosen is None:
            return _full(job, limit, "max-items" if over_items else "max-size", items, total)
        self.victims += [jid for jid, _ in chosen if jid not in self.batch_jids]
        for jid, _ in chosen:
            if jid in self.batch_jids:
                self.own_victims.append((jid, self.latest[jid]))
                del self.places[jid]
        self.discarded[job.queue] += len(chosen)
        self._usage(job.queue)[0] -= len(chosen)
        self._usage(job.queue)[1] -= sum(size for _, size in chosen)
        return None

    def _victims(
        self, job: NewJob, limit: Bounds, after: list[int]
    ) -> list[tuple[str, int]] | None:
        """The oldest waiting jobs to drop so that `after` fits the bounds (those stored,
        then those this put made), or None if dropping all of them would not be enough."""
        queue = job.queue
        chosen: list[tuple[str, int]] = []
        items, total = after
        candidates = self.candidates.setdefault(queue, self._waiting(queue))
        made, taken = self.made.get(queue, []), self.made_from[queue]
        while (limit.items and items > limit.items) or (limit.size and total > limit.size):
            victim = next(candidates, None)
            while victim is None and taken < len(made):
                jid, size, serial = made[taken]
                taken += 1
                if jid != job.jid and self.latest[jid] == serial:
                    victim = jid, size
            if victim is None:
                return None
            chosen.append(victim)
            items, total = items - 1, total - victim[1]
        self.made_from[queue] = taken
        return chosen

    def _waiting(self, queue: str) -> Iterator[tuple[str, int]]:
        """The queue's waiting jobs in the order a discard drops them, but those this put
        moves: the head of the queue first (pop's order), as Kestrel drops its oldest."""
        # Read through the pop index a few at a time: most puts drop one job or none.
        offset = 0
        while True:
            found = self.conn.execute(
                "SELECT jid, size FROM jobs WHERE queue = ? AND state = 'waiting' "
                "ORDER BY priority DESC, ready_at, seq LIMIT ? OFFSET ?",
                (queue, _CHUNK, offset),
            ).fetchall()
            yield from ((jid, size) for jid, size in found if jid not in self.batch_jids)
            if len(found) < _CHUNK:
                return
            offset += _CHUNK

    def _usage(self, queue: str) -> list[int]:
        found = self.usage.get(queue)
        if found is None:
            row = self.conn.execute(
                "SELECT items, bytes FROM queue_usage WHERE queue = ?", (queue,)
            ).fetchone()
            found = self.usage[queue] = list(row) if row else [0, 0]
        return found


def _full(job: NewJob, limit: Bounds, bound: str, items: int, total: int) -> QueueFull:
    held = f"{items} jobs" if bound == "max-items" else f"{total} bytes"
    maximum = limit.items if bound == "max-items" else limit.size
    return QueueFull(
        f"put(): queue {job.queue!r} is full: it holds {held}, its {bound} is {maximum}; "
        f"job {job.jid} was not put"
    )


def drop_expired(conn: sqlite3.Connection, queue: str, now: float) -> None:
    """Delete the queue's waiting jobs whose time is up (at most MAX_EXPIRED_PER_POP)."""
    # A plain read of the index first: a DELETE ... WHERE jid IN (subquery) would build
    # a temporary table at every pop, even when nothing expired.
    gone = [
        row[0]
        for row in conn.execute(
            "SELECT jid FROM jobs WHERE queue = ? AND state = 'waiting' AND expires_at <= ? "
            "LIMIT ?",
            (queue, now, MAX_EXPIRED_PER_POP),
        )
    ]
    if gone:
        job_rows.drop(conn, gone, now, "expired")
        count_dropped(conn, "expired", {queue: len(gone)})


def count_dropped(conn: sqlite3.Connection, field: Dropped, counts: Mapping[str, int]) -> None:
    """Add to the `expired` or `discarded` counter of queues."""
    # `field` is one of two literals, never caller text.
    conn.executemany(
        f"INSERT INTO queue_usage (queue, {field}) VALUES (?, ?) "
        f"ON CONFLICT(queue) DO UPDATE SET {field} = {field} + excluded.{field}",
        [(queue, n) for queue, n in counts.items() if n],
    )


def usage(conn: sqlite3.Connection, queue: str) -> QueueUsage:
    row = conn.execute(
        "SELECT items, bytes, total_items, expired, discarded FROM queue_usage WHERE queue = ?",
        (queue,),
    ).fetchone()
    return QueueUsage(queue, *(row or (0, 0, 0, 0, 0)))

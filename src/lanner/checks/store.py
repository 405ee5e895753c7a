"""The checks of the commands on the store: queue counts, job listings and pages (failed,
tagged, tags_top), pause/unpause/forget, unfail, stats, a worker's jobs (`engine/store.py`'s
commands)."""

from __future__ import annotations

from typing import Final, NamedTuple

from lanner.checks.names import label, queue_name, queue_names, sequence
from lanner.checks.values import integer, now, timestamp
from lanner.errors import MalformedArgument

LISTABLE_STATES: Final = ("complete", "waiting", "running", "stalled", "scheduled", "depends")
"""The states `jobs()` lists (and `recurring`, for templates)."""


class QueueAt(NamedTuple):
    """queue_counts, length."""

    queue: str
    now: float


def queue_at(queue: object, when: float | None) -> QueueAt:
    return QueueAt(queue_name(queue), now(when))


class Listing(NamedTuple):
    """jobs(): which state, of which queue (None for complete jobs), which page."""

    state: str
    queue: str | None
    offset: int
    limit: int
    now: float


def listing(
    state: object, queue: object, offset: object, count: object, when: float | None
) -> Listing:
    if state not in (*LISTABLE_STATES, "recurring"):
        raise MalformedArgument(
            f"jobs(): unknown state {state!r}; known: {', '.join(LISTABLE_STATES)}, recurring"
        )
    checked_offset, checked_count = integer(offset, "offset", 0), integer(count, "count", 0)
    checked_queue = None
    if state != "complete":
        if queue is None:
            raise MalformedArgument(f"jobs(): state {state!r} needs a queue")
        checked_queue = queue_name(queue)
    return Listing(str(state), checked_queue, checked_offset, checked_count, now(when))


class Queues(NamedTuple):
    """pause, unpause, queue_forget."""

    queues: list[str]
    now: float


def queues(values: object, when: float | None) -> Queues:
    return Queues(queue_names(sequence(values, "queues")), now(when))


class Page(NamedTuple):
    """failed (key: the group), tagged (key: the tag), tags_top (key: '')."""

    key: str
    offset: int
    limit: int
    now: float


def failed_page(group: object, start: object, limit: object, when: float | None) -> Page:
    return Page(
        label(group, "group"), integer(start, "start", 0), integer(limit, "limit", 0), now(when)
    )


def tagged_page(tag: object, offset: object, count: object, when: float | None) -> Page:
    return Page(
        label(tag, "tag"), integer(offset, "offset", 0), integer(count, "count", 0), now(when)
    )


def top_page(offset: object, count: object, when: float | None) -> Page:
    return Page("", integer(offset, "offset", 0), integer(count, "count", 0), now(when))


class Unfail(NamedTuple):
    queue: str
    group: str
    limit: int
    now: float


def unfail(queue: object, group: object, count: object, when: float | None) -> Unfail:
    return Unfail(queue_name(queue), label(group, "group"), integer(count, "count", 0), now(when))


class Stats(NamedTuple):
    queue: str
    date: float


def stats(queue: object, date: object) -> Stats:
    return Stats(queue_name(queue), timestamp(date))


class WorkerAt(NamedTuple):
    worker: str
    now: float


def worker_at(worker: object, when: float | None) -> WorkerAt:
    return WorkerAt(label(worker, "worker"), now(when))

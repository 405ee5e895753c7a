"""Queue counts without a request per question: SQS's approximate counts, reused briefly and
corrected by what this process sees.

A worker asks which of its queues have work before each round (Reduced Lottery's emptiness
check, `queues()`), several times a second. Each answer from SQS costs a request
(GetQueueAttributes: ApproximateNumberOfMessages, ...NotVisible, ...Delayed), so `queues()`
reuses a queue's counts for `counts_cache_sec`, and meanwhile corrects them with what this
process learns for free: a receive that came back short means the queue has nothing more
waiting; one that came back full means it may have more; its own sends add waiting jobs.
`queue_counts()` and `length()` always ask SQS (a caller asking about one queue wants it
now). SQS's counts are approximate themselves (about a minute behind on AWS).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from lanner.records import QueueCounts


@dataclass
class _Entry:
    counts: QueueCounts
    at: float  # time.monotonic() of SQS's answer (or of an empty receive)


class CountsCache:
    """Counts by lanner queue name, with how old they are."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def fresh(self, queue: str) -> QueueCounts | None:
        """The counts if SQS gave them (or an empty receive showed them) within the ttl."""
        entry = self._entries.get(queue)
        if entry is None or time.monotonic() - entry.at >= self.ttl:
            return None
        return entry.counts

    def store(self, counts: QueueCounts) -> None:
        with self._lock:
            self._entries[counts.name] = _Entry(counts, time.monotonic())

    def received(self, queue: str, got: int, asked: int) -> None:
        """A receive of `asked` messages gave `got`: short means nothing more is waiting."""
        with self._lock:
            entry = self._entries.get(queue)
            if entry is None:
                if got < asked:  # known empty, for free
                    self._entries[queue] = _Entry(_counts(queue, 0, got), time.monotonic())
                return
            old = entry.counts
            waiting = 0 if got < asked else max(1, old.waiting - got)
            entry.counts = _counts(queue, waiting, old.running + got, old.scheduled)
            if got < asked:
                entry.at = time.monotonic()

    def sent(self, queue: str, count: int, delayed: bool) -> None:
        """This process sent `count` messages to the queue."""
        with self._lock:
            entry = self._entries.get(queue)
            if entry is not None:
                old = entry.counts
                entry.counts = _counts(
                    queue,
                    old.waiting + (0 if delayed else count),
                    old.running,
                    old.scheduled + (count if delayed else 0),
                )

    def settled(self, queue: str, count: int) -> None:
        """This process deleted `count` messages it had received from the queue."""
        with self._lock:
            entry = self._entries.get(queue)
            if entry is not None:
                old = entry.counts
                entry.counts = _counts(
                    queue, old.waiting, max(0, old.running - count), old.scheduled
                )


def _counts(queue: str, waiting: int, running: int, scheduled: int = 0) -> QueueCounts:
    return QueueCounts(
        name=queue,
        waiting=waiting,
        stalled=0,
        running=running,
        scheduled=scheduled,
        depends=0,
        recurring=0,
        paused=False,
    )


def from_attributes(queue: str, attributes: dict[str, str]) -> QueueCounts:
    """Counts from GetQueueAttributes' approximate numbers."""
    return _counts(
        queue,
        int(attributes.get("ApproximateNumberOfMessages", 0)),
        int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


COUNT_ATTRIBUTES = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]

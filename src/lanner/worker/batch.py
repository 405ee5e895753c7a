"""A popped batch as a worker process works through it, shared by the loop and its keeper.

The loop takes jobs one at a time and records those that ran; the keeper thread may give
back the unstarted rest, or complete what ran, while a task runs. Every change happens
under the batch's lock, and a job is only ever in one place: unstarted, taken, or done.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

from lanner.job import Job


class Batch:
    """The jobs of one pop of `queue`, in the order they run."""

    def __init__(self, queue: str, jobs: Sequence[Job]) -> None:
        self.queue = queue
        self.popped_at = time.monotonic()
        self._lock = threading.Lock()
        self._unstarted = deque(jobs)
        self._done: list[str] = []
        self._results: dict[str, str] = {}  # of the jobs in `_done` that keep one
        self._done_since = 0.0  # when the oldest job of `_done` finished (monotonic)

    def take(self) -> Job | None:
        """The next job to run, now the loop's; None when none is left."""
        with self._lock:
            return self._unstarted.popleft() if self._unstarted else None

    def take_rest(self) -> list[Job]:
        """Every job not started yet, to be given back."""
        with self._lock:
            rest = list(self._unstarted)
            self._unstarted.clear()
            return rest

    def unstarted(self) -> int:
        with self._lock:
            return len(self._unstarted)

    def ran(self, jid: str, result: str | None = None) -> None:
        """`jid` ran successfully (keeping `result`, JSON text): it waits to be completed."""
        with self._lock:
            if not self._done:
                self._done_since = time.monotonic()
            self._done.append(jid)
            if result is not None:
                self._results[jid] = result

    def done_for(self) -> float:
        """How long the oldest job waiting to be completed has waited (0: none waits)."""
        with self._lock:
            return time.monotonic() - self._done_since if self._done else 0.0

    def take_done(self) -> tuple[list[str], dict[str, str]]:
        """The jobs waiting to be completed, and their results: the caller's to complete."""
        with self._lock:
            done, self._done = self._done, []
            results, self._results = self._results, {}
            return done, results

"""The keeper of a worker process: a thread that does what cannot wait for a task to end.

While a task runs, the keeper
- heartbeats the running job's lock every third of it, so a long task keeps its job;
- runs the loop's batch duty every BATCH_TICK_SEC while a batch is in hand: give back the
  unstarted rest of a batch held too long, complete jobs that ran (see loop.py).

It wakes every ninth of the lock (at most once a second) when no batch is in hand, and
beats only when a beat is due, so short jobs cost it nothing: `watch` and `keep` only
record what to keep, and wake the thread only when a batch begins.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from lanner.engine import Engine
from lanner.errors import LannerError

logger = logging.getLogger("lanner.worker")

BATCH_TICK_SEC: Final = 0.05
"""How often the batch duty runs while a batch is in hand."""


class Keeper:
    """One per worker process (and one thread, started at the first job)."""

    def __init__(self, engine: Callable[[], Engine], worker: str) -> None:
        self._engine = engine  # the worker's, opened by the time a job runs
        self._worker = worker
        self._watched: tuple[str, float, float] | None = None  # jid, interval, last beat
        self._period = 1.0
        self._duty: Callable[[], None] | None = None  # the batch duty, while a batch is kept
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopped = False

    def watch(self, jid: str | None, lock_seconds: float = 60.0) -> None:
        """Heartbeat `jid`'s lock from now on (None: nothing runs)."""
        if jid is None:
            self._watched = None
            return
        self._period = min(lock_seconds / 9, 1.0)
        self._watched = (jid, lock_seconds / 3, time.monotonic())
        self._start()

    def keep(self, duty: Callable[[], None] | None) -> None:
        """Run `duty` every BATCH_TICK_SEC from now on (None: no batch in hand)."""
        self._duty = duty
        if duty is not None:
            self._start()
            self._wake.set()

    def stop(self) -> None:
        """End the thread (a loop that is done with its engine)."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _start(self) -> None:
        if self._thread is None:
            self._stopped = False
            self._thread = threading.Thread(target=self._run, name="lanner-keeper", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(BATCH_TICK_SEC if self._duty is not None else self._period)
            self._wake.clear()
            if self._stopped:
                return
            duty = self._duty
            if duty is not None:
                self._attempt("the batch duty", duty)
            self._beat()

    def _beat(self) -> None:
        watched = self._watched
        if watched is None or time.monotonic() - watched[2] < watched[1]:
            return
        jid = watched[0]
        self._attempt(f"heartbeat of {jid}", lambda: self._engine().heartbeat(jid, self._worker))
        if self._watched is watched:
            self._watched = (jid, watched[1], time.monotonic())

    @staticmethod
    def _attempt(what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except LannerError as error:
            logger.warning("%s failed: %s", what, error)
        except Exception:
            logger.exception("%s failed", what)

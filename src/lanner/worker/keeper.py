"""The keeper of a worker process: a thread that does what cannot wait for a task to end.

While a task runs, the keeper
- heartbeats the running job's lock every third of it, so a long task keeps its job;
- looks at the job every CHECK_EVERY_SEC once it has run that long: a job cancelled,
  failed or handed to another worker (its lock lost) is no longer this task's, and the
  keeper says so (`on_gone`), which stops the task;
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

from lanner.engine import Capability, Engine
from lanner.errors import JobNotFound, LannerError, LockLost
from lanner.job import JobState

logger = logging.getLogger("lanner.worker")

BATCH_TICK_SEC: Final = 0.05
"""How often the batch duty runs while a batch is in hand."""
CHECK_EVERY_SEC: Final = 1.0
"""How often a running job is looked at: how soon a cancel reaches its task."""


def lock_needed(time_limit: float | None, lock_seconds: float) -> float:
    """How long a job's lock must still last when its task starts, or be extended first:
    its time limit; for a task without one, until the first heartbeat (a third of the
    lock after the start), with room to spare."""
    return time_limit if time_limit is not None else lock_seconds / 2


class _Watched:
    """The running job: when it was last heartbeaten, last looked at."""

    __slots__ = ("beat_every", "gone", "jid", "last_beat", "last_check", "on_gone")

    def __init__(self, jid: str, beat_every: float, on_gone: Callable[[str, str], None]) -> None:
        self.jid = jid
        self.beat_every = beat_every
        self.on_gone = on_gone
        self.last_beat = self.last_check = time.monotonic()
        self.gone = False


class Keeper:
    """One per worker process (and one thread, started at the first job)."""

    def __init__(self, engine: Callable[[], Engine], worker: str) -> None:
        self._engine = engine  # the worker's, opened by the time a job runs
        self._worker = worker
        self._watched: _Watched | None = None
        self._period = 1.0
        self._duty: Callable[[], None] | None = None  # the batch duty, while a batch is kept
        self._on_duty = threading.Lock()  # held while the batch duty runs
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopped = False

    def watch(
        self,
        jid: str | None,
        lock_seconds: float = 60.0,
        on_gone: Callable[[str, str], None] = lambda jid, why: None,
    ) -> None:
        """Keep `jid` from now on (None: nothing runs); `on_gone(jid, why)` once it is no
        longer this worker's to run."""
        if jid is None:
            self._watched = None
            return
        self._period = min(lock_seconds / 9, CHECK_EVERY_SEC)
        self._watched = _Watched(jid, lock_seconds / 3, on_gone)
        self._start()

    def keep(self, duty: Callable[[], None] | None) -> None:
        """Run `duty` every BATCH_TICK_SEC from now on (None: no batch in hand).

        `keep(None)` returns once a duty already running has ended: what it took of the
        batch (a completion, a give-back) is then done, not left half-way for the loop's
        next batch or its exit to cut short."""
        self._duty = duty
        if duty is not None:
            self._start()
            self._wake.set()
            return
        with self._on_duty:
            pass

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
            with self._on_duty:
                duty = self._duty  # read under the lock: a duty keep(None) ended never starts
                if duty is not None:
                    self._attempt("the batch duty", duty)
            watched = self._watched
            if watched is not None and not watched.gone:
                self._keep_running(watched)

    def _keep_running(self, watched: _Watched) -> None:
        now = time.monotonic()
        why: str | None = None
        try:
            if now - watched.last_beat >= watched.beat_every:
                watched.last_beat = now
                self._engine().heartbeat(watched.jid, self._worker)
            elif now - watched.last_check >= CHECK_EVERY_SEC:
                watched.last_check = now
                why = self._not_ours(watched.jid)
        except (LockLost, JobNotFound) as lost:
            why = str(lost)
        except LannerError as error:
            logger.warning("keeping job %s: %s", watched.jid, error)
        except Exception:
            logger.exception("keeping job %s", watched.jid)
        if why is not None and self._watched is watched:
            watched.gone = True
            watched.on_gone(watched.jid, why)

    def _not_ours(self, jid: str) -> str | None:
        """Why the job is no longer this worker's to run, or None if it still is (or the
        engine cannot look it up: then a lost lock shows at the next heartbeat)."""
        engine = self._engine()
        if Capability.LOOKUP not in engine.capabilities:
            return None
        job = engine.get(jid)
        if job is None:
            return "it was cancelled"
        if job.state != JobState.RUNNING or job.worker != self._worker:
            holder = f" by {job.worker}" if job.worker else ""
            return f"its lock was lost: it is {job.state}{holder}"
        return None

    @staticmethod
    def _attempt(what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except LannerError as error:
            logger.warning("%s failed: %s", what, error)
        except Exception:
            logger.exception("%s failed", what)

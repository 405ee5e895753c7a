"""A running task's progress: reported by the task, written throttled, read by anyone.

    @app.task
    def convert(files: list[str]) -> None:
        for done, name in enumerate(files, 1):
            ...
            lanner.current_job().progress(done / len(files), f"{name} converted")

    handle.progress()   # Progress(fraction=0.4, message='b.png converted', when=...)

A report is a history entry (`log(jid, "progress", {fraction, message})`, the engines'
LOG capability): the engines keep only the latest of a run of them, and announce each as
a `progress` event (docs/protocol.md), which `lanner job` and the dashboard show.

Reporting never waits for the store, so a tight loop may report as often as it likes, and
an async task never blocks its event loop: the value is handed to a thread of this
process (one per engine), which writes a job's progress at most once every
WRITE_EVERY_SEC; the first report of a job is written at once, later ones inside the
window are kept pending, the latest replacing the older. The worker writes what is still
pending as the task ends, before it settles the job (`finish`): the last value a task
reported is in the store by the time its job is complete or failed. A write that fails
(the store is away, the job was cancelled) is logged and dropped: progress is never the
reason a job fails.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from lanner import checks, context
from lanner.engine import Capability
from lanner.errors import LannerError, Unsupported
from lanner.job import PROGRESS_ENTRY, Job

if TYPE_CHECKING:
    from lanner.engine import Engine

logger = logging.getLogger("lanner.progress")

WRITE_EVERY_SEC: Final = 1.0
"""The shortest time between two writes of one job's progress: a dashboard refreshed
every second sees each, and a million reports a second cost the store one write."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far along a job's task said it was: `fraction` from 0 to 1, a `message`, and
    `when` (Unix time) the store wrote it."""

    fraction: float
    message: str
    when: float


def of(job: Job | None) -> Progress | None:
    """The progress of the job's current or last run (None: none reported since it was
    last popped, or no job)."""
    if job is None or PROGRESS_ENTRY not in job.history_json:
        return None
    for event in reversed(job.history):
        if event.what == "popped":
            return None
        if event.what == PROGRESS_ENTRY:
            fraction = event.details.get("fraction", 0)
            message = event.details.get("message", "")
            return Progress(float(fraction), str(message), event.when)
    return None


def report(jid: str, fraction: float, message: str = "") -> None:
    """`Job.progress`: check the report, and hand it to the writer of the job's engine."""
    running = context.current_job()
    if running is None or running.jid != jid:
        raise LannerError(
            f"job {jid}: progress is reported by the task running the job, in its own "
            "context (lanner.current_job().progress(...))"
        )
    details = checks.progress({"fraction": fraction, "message": message})
    engine = context.current_engine()
    if engine is None:
        return  # eager mode: the job is not in a store, its handle is settled already
    if Capability.LOG not in engine.capabilities:
        raise Unsupported(engine.name, "progress (Job.progress)", Capability.LOG.value)
    _writer(engine).put(jid, details)


def finish(engine: Engine, jid: str) -> None:
    """The worker, as the job's task ended: write its pending progress, if any, before the
    job settles (nothing to do, and no lock taken, for a job that reported none)."""
    if reported(engine, jid):
        _writers[(os.getpid(), id(engine))].flush(jid)


def reported(engine: Engine, jid: str) -> bool:
    """Whether the job reported progress here that `finish` has not written yet (the
    async worker asks, so as to call `finish` off its event loop only when needed)."""
    if not _writers:  # most processes: no task ever reported progress
        return False
    writer = _writers.get((os.getpid(), id(engine)))
    return writer is not None and jid in writer.known


IDLE_SEC: Final = 30.0
"""A writer's thread ends after this long with nothing to write (and starts again)."""

_NEVER: Final = float("-inf")
_writers: dict[tuple[int, int], _Writer] = {}  # (process, id(engine)) -> its writer
_writers_lock = threading.Lock()


def _writer(engine: Engine) -> _Writer:
    key = (os.getpid(), id(engine))  # a forked process starts writers of its own
    writer = _writers.get(key)
    if writer is None:
        with _writers_lock:
            writer = _writers.setdefault(key, _Writer(engine))
    return writer


class _Writer:
    """One engine's progress reports, written by a daemon thread of its own.

    Lock order: `_writing` (one write at a time), then `_changed`: a `flush` waits for a
    write in flight, so a later value never lands before an earlier one.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._changed = threading.Condition()
        self._writing = threading.Lock()
        self._pending: dict[str, dict[str, object]] = {}
        self._written: dict[str, float] = {}  # jid -> when (monotonic) it was last written
        self.known: set[str] = set()  # jobs that reported here and were not finished
        self._thread: threading.Thread | None = None

    def put(self, jid: str, details: dict[str, object]) -> None:
        with self._changed:
            self._pending[jid] = details
            self.known.add(jid)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lanner-progress", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def flush(self, jid: str) -> None:
        with self._writing:
            with self._changed:
                details = self._pending.pop(jid, None)
                self._written.pop(jid, None)
                self.known.discard(jid)
            if details is not None:
                self._write(jid, details)

    def _run(self) -> None:
        while True:
            with self._changed:
                wait = self._wait()
                if wait is None and not self._changed.wait(IDLE_SEC) and not self._pending:
                    self._thread = None  # idle: `put` starts another when needed
                    return
                if wait is None or wait > 0:
                    if wait is not None:
                        self._changed.wait(wait)
                    continue
            with self._writing:
                with self._changed:
                    due = self._take_due()
                for jid, details in due:
                    self._write(jid, details)

    def _wait(self) -> float | None:
        """Seconds until some pending report may be written (0: now; None: none pending)."""
        now = time.monotonic()
        waits = [self._written.get(jid, _NEVER) + WRITE_EVERY_SEC - now for jid in self._pending]
        return max(0.0, min(waits)) if waits else None

    def _take_due(self) -> list[tuple[str, dict[str, object]]]:
        now = time.monotonic()
        due = [
            jid for jid in self._pending if now - self._written.get(jid, _NEVER) >= WRITE_EVERY_SEC
        ]
        for jid, last in list(self._written.items()):  # forget windows long closed
            if now - last > WRITE_EVERY_SEC and jid not in self._pending:
                del self._written[jid]
        for jid in due:
            self._written[jid] = now
        return [(jid, self._pending.pop(jid)) for jid in due]

    def _write(self, jid: str, details: dict[str, object]) -> None:
        try:
            self._engine.log(jid, PROGRESS_ENTRY, details)
        except LannerError as error:
            logger.warning("progress of job %s not written: %s", jid, error)
        except Exception:  # never the end of the writer
            logger.exception("progress of job %s not written", jid)

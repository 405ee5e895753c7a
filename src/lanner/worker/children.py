"""The supervisor's children: what it knows of each (`Child`, from its reports), and
what it does when one dies or overruns (`ChildCare`, a part of `WorkerPool`).

Each report a child sends (child.py) updates its record: the batch it holds, the jobs it
runs (with their deadlines), those it finished and has not completed. When a child is
reaped, what it held is given back (recovery.py, as a chore) and it is replaced, after a
growing pause if it died young (a crash loop); a child whose task overruns its time limit
by the grace is killed with its process group; the finished jobs of a child too stuck to
complete them are completed for it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import select
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Final

from lanner.engine import Capability, Engine
from lanner.errors import StoreMisconfigured
from lanner.worker.child import (
    BatchPopped,
    BatchSettled,
    EngineFailed,
    JobFinished,
    JobsCompleted,
    JobStarted,
    JobStopping,
    Report,
    StoreRefused,
    WorkerExiting,
    decode_report,
    split_frames,
)
from lanner.worker.chores import Chores
from lanner.worker.observer import PoolObserver
from lanner.worker.outage import Backoff
from lanner.worker.processes import kill_group
from lanner.worker.recovery import DeadWorker, recovery

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.pool")

SETTLE_FOR_CHILD_SEC: Final = 1.0
"""A child's finished jobs still not completed after this long (it was stopped, or is
stuck) are completed by the supervisor on its behalf, before their locks run out."""

YOUNG_DEATH_SEC: Final = 1.0
"""A child that dies younger than this, before starting a task, is replaced after a
growing pause."""

READ_SIZE: Final = 65536
"""The most of a child's pipe read at once (a pipe holds 64 KiB)."""

RECYCLED: Final = ("max-tasks", "max-memory")
"""Why a child exits to be replaced (`WorkerLoop.run`'s reasons for the limits)."""


@dataclass
class Child:
    """A child process as its supervisor knows it, from its reports."""

    process: BaseProcess
    conn: Connection
    worker: str
    started_at: float = field(default_factory=time.monotonic)
    held: dict[str, str] = field(default_factory=dict)  # jid -> queue: popped, not finished
    running: dict[str, JobStarted] = field(default_factory=dict)  # its jobs running now
    finished: dict[str, tuple[float, str]] = field(default_factory=dict)  # jid -> when,
    # queue: ran and not known to be completed
    exited_cleanly: bool = False
    killed_for: str = ""
    culprit: str | None = None  # the job it was killed for (past its time limit)
    stopping: dict[str, str] = field(default_factory=dict)  # jid -> why its task was told
    # to stop (cancelled, lock lost)
    jobs_started: int = 0
    # Asked whether the pipe holds more: Connection.poll builds a selector per call,
    # which cost the supervisor more than the report itself.
    _reports: select.poll = field(default_factory=select.poll, init=False, repr=False)
    _unread: bytearray = field(default_factory=bytearray, init=False, repr=False)

    def __post_init__(self) -> None:
        self._reports.register(self.conn.fileno(), select.POLLIN)

    def has_report(self) -> bool:
        return bool(self._reports.poll(0))

    def take_reports(self) -> list[bytes]:
        """Every whole report the pipe holds now, read in as few reads as it takes (a
        report cut short waits for its end). Raises OSError if the pipe is closed."""
        fd = self.conn.fileno()
        while self.has_report():
            chunk = os.read(fd, READ_SIZE)
            if not chunk:
                break  # the child's end is closed: it exited
            self._unread += chunk
        return split_frames(self._unread)


class ChildCare:
    """The part of `WorkerPool` that reads its children's reports and deals with their
    deaths and overruns."""

    if TYPE_CHECKING:
        app: App
        processed: int
        time_limit_grace: float
        _children: dict[int, Child]
        _ready: select.poll
        _observer: PoolObserver
        _chores: Chores
        _stopping_since: float | None
        _cold: bool
        _spawns_due: list[float]
        _respawn: Backoff

        def _store_refused(self, error: StoreMisconfigured) -> None: ...

    def _forget(self, child: Child) -> None:
        """Stop waiting for a reaped child's reports and exit."""
        for fd in (child.conn.fileno(), child.process.sentinel):
            with contextlib.suppress(KeyError, ValueError):
                self._ready.unregister(fd)

    def _read(self, child: Child) -> None:
        try:
            reports = child.take_reports()
        except OSError:
            return  # the child is gone; _reap handles it
        for data in reports:
            self._on_report(child, decode_report(data))

    def _on_report(self, child: Child, report: Report) -> None:
        match report:
            case BatchPopped(queue, jids):
                child.held.update(dict.fromkeys(jids, queue))
            case JobStarted():
                child.running[report.jid] = report
                child.jobs_started += 1
            case JobStopping(jid, why) if jid in child.running:
                # Killed after the grace unless its task stops: as if its time ran out now.
                child.running[jid] = child.running[jid]._replace(deadline=time.time())
                child.stopping[jid] = why
            case JobFinished():
                self._finished(child, report)
            case JobsCompleted(jids):
                for jid in jids:
                    child.finished.pop(jid, None)
            case BatchSettled():
                child.held.clear()
            case WorkerExiting(reason):
                child.exited_cleanly = True
                logger.info("worker %s exits: %s", child.worker, reason)
                if reason in RECYCLED and self._stopping_since is None:
                    self._observer.recycled(reason)
            case EngineFailed():
                self._observer.engine_error("worker")
            case StoreRefused(error):
                self._store_refused(error)

    def _finished(self, child: Child, report: JobFinished) -> None:
        child.running.pop(report.jid, None)
        child.stopping.pop(report.jid, None)
        queue = child.held.pop(report.jid, "")
        if report.succeeded:
            child.finished[report.jid] = (time.monotonic(), queue)
        self.processed += 1
        if report.outcome:
            self._observer.job_finished(queue, report.klass, report.outcome, report.seconds)

    def _reap(self, pid: int, child: Child) -> None:
        self._read(child)
        child.process.join(timeout=1)
        kill_group(pid)  # what its tasks started dies with it
        del self._children[pid]
        self._forget(child)
        child.conn.close()
        self._observer.children(len(self._children))
        if not child.exited_cleanly or child.held or child.running or child.finished:
            self._recover(child)
        if self._stopping_since is None:
            pause = 0.0
            if self._crashed_young(child):
                pause = self._respawn.pause  # a crash loop must not fork as fast as it can
                self._respawn.grow()
                logger.warning("worker %s died young: its replacement starts in %g s",
                               child.worker, pause)  # fmt: skip
            else:
                self._respawn.reset()
            self._spawns_due.append(time.monotonic() + pause)

    @staticmethod
    def _crashed_young(child: Child) -> bool:
        """Died of itself soon after it started, before any task: a crash loop (a bad
        import, a startup hook that fails), not a job's death, which the job's own retries
        pace, nor a kill from outside (SIGKILL), after which it is replaced at once."""
        young = time.monotonic() - child.started_at < YOUNG_DEATH_SEC
        killed = child.process.exitcode == -signal.SIGKILL and not child.killed_for
        return not child.exited_cleanly and young and child.jobs_started == 0 and not killed

    def _recover(self, child: Child) -> None:
        """Give back what the child held, dead or exited before all was settled (a chore:
        never waits on the store)."""
        code = child.process.exitcode
        if child.exited_cleanly and not child.killed_for and code == 0:
            # It exited on purpose (a shutdown, a recycle) but could not settle everything
            # (the store was away at its end): nobody died, what is left is settled here.
            cause = "worker process exited before its jobs were settled"
            logger.warning("worker %s exited before settling %d job(s): settling them",
                           child.worker, len({*child.held, *child.finished}))  # fmt: skip
        else:
            cause = child.killed_for or f"worker process died (exit code {code})"
            running = (
                f" running job {', '.join(child.running)}" if len(child.running) < 4
                else f" running {len(child.running)} jobs"
            ) if child.running else ""  # fmt: skip
            logger.error("worker %s%s: %s; giving back its jobs", child.worker, running, cause)
        dead = DeadWorker(
            worker=child.worker,
            reported=tuple(child.held),
            running=tuple(child.running.values()),
            finished=tuple((queue, jid) for jid, (_, queue) in child.finished.items()),
            cause=cause,
            culprit=child.culprit,
            shutdown=self._cold and not child.killed_for,
        )
        self._chores.add(
            f"giving back the jobs of {child.worker}",
            recovery(dead, self.app.settings.retry_delay),
        )

    def _settle_for_stalled_children(self) -> None:
        """Complete the finished jobs of a child too stopped or stuck to complete them."""
        now = time.monotonic()
        for child in self._children.values():
            overdue: dict[str, list[str]] = {}  # queue -> jids
            for jid, (at, queue) in list(child.finished.items()):
                if now - at > SETTLE_FOR_CHILD_SEC:
                    del child.finished[jid]
                    overdue.setdefault(queue, []).append(jid)
            for queue, jids in overdue.items():
                self._chores.add(
                    f"completing {len(jids)} finished job(s) of {child.worker}",
                    functools.partial(_complete, jids=jids, worker=child.worker, queue=queue),
                )

    def _enforce_time_limits(self) -> None:
        now = time.time()
        for pid, child in self._children.items():
            if child.killed_for:
                continue
            late_job = next(
                (job for job in child.running.values()
                 if now > job.deadline + self.time_limit_grace),
                None,
            )  # fmt: skip
            if late_job is not None:
                late, why = f"{self.time_limit_grace:g} s", child.stopping.get(late_job.jid)
                child.culprit = late_job.jid
                child.killed_for = (
                    f"job {late_job.jid} "
                    + (f"did not stop {late} after {why}" if why
                       else f"ran {late} past its time limit")
                    + "; its process was killed"
                )  # fmt: skip
                logger.error("worker %s: %s", child.worker, child.killed_for)
                kill_group(pid)
                self._observer.hard_killed()

    def _kill_all(self) -> None:
        self._cold = True
        for pid in self._children:
            kill_group(pid)


def _complete(engine: Engine, jids: list[str], worker: str, queue: str) -> None:
    if Capability.WORKERS not in engine.capabilities:
        logger.warning("the %s engine cannot complete jobs of %s from the supervisor: they run "
                       "again when their locks run out: %s", engine.name, worker, jids)  # fmt: skip
        return
    engine.complete_many(jids, worker, queue)

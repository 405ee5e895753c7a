"""The worker pool: a supervisor process and N child processes, each running a WorkerLoop.

The supervisor
- starts N children (forked) and replaces any that exits or dies;
- recycles a child after `max_tasks_per_child` tasks or `max_memory_per_child_mb` of RSS
  (the child finishes its task, gives back its batch and exits; a new one starts);
- kills a child whose task runs `time_limit_grace` seconds past its time limit (stuck in C
  code, or ignoring TimeLimitExceeded), then retries or fails that job by its policy;
- recovers a dead child's work at once instead of waiting for locks to expire: its
  finished jobs are completed, the job it was running is retried (it may be what killed
  it), and the jobs of its batch it had not started are released;
- on SIGTERM or SIGINT shuts down warm: children finish their running task within
  `shutdown_timeout` and give back the rest at once; on a second signal, or when the
  timeout passes, shuts down cold: children are killed and their jobs released.

Children report what they do over a pipe: the batch they popped, the job they started
(with its deadline and retry plan) and the jobs they finished. That is all the supervisor
needs to step in for them, and to count running and processed jobs.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING, NamedTuple

from lanner.engine import Capability
from lanner.errors import LannerError
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.worker.loop import Limits, WorkerLoop, configure_queues

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.pool")


@dataclass(frozen=True, slots=True)
class PoolCounts:
    queued: int  # jobs waiting or scheduled in the pool's queues
    running: int  # jobs the children are running now
    processed: int  # jobs the children finished (succeeded or failed) since start
    children: int  # live child processes


# What a child tells the supervisor over its pipe, in the order the loop does it.
class BatchPopped(NamedTuple):
    queue: str
    jids: list[str]


class JobStarted(NamedTuple):
    jid: str
    deadline: float  # when its time limit runs out (Unix time)
    retry_delay: float | None  # None: no retry left


class JobFinished(NamedTuple):
    jid: str
    succeeded: bool  # True: its completion waits for the end of the batch


class BatchSettled(NamedTuple):
    """The batch's completions are stored and its unstarted jobs given back."""


class WorkerExiting(NamedTuple):
    reason: str


Report = BatchPopped | JobStarted | JobFinished | BatchSettled | WorkerExiting


@dataclass
class _Child:
    process: BaseProcess
    conn: Connection
    worker: str
    queue: str = ""
    batch: list[str] = field(default_factory=list)
    running: JobStarted | None = None
    succeeded: list[str] = field(default_factory=list)  # finished, completion not yet stored
    exited_cleanly: bool = False
    killed_for: str = ""


class _PipeReporter:
    """The child's side: tells the supervisor what the loop does."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def batch(self, queue: str, jids: Sequence[str]) -> None:
        self._conn.send(BatchPopped(queue, list(jids)))

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None:
        self._conn.send(JobStarted(jid, deadline, retry_delay))

    def finished(self, jid: str, succeeded: bool) -> None:
        self._conn.send(JobFinished(jid, succeeded))

    def flushed(self) -> None:
        self._conn.send(BatchSettled())


class WorkerPool:
    """Supervise `concurrency` worker processes for `app` (usable from Python and the CLI)."""

    def __init__(
        self,
        app: App,
        *,
        concurrency: int = 2,
        queues: Sequence[QueueConfig] | None = None,
        selector: str | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child_mb: int | None = None,
        shutdown_timeout: float | None = None,
        time_limit_grace: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        settings = app.settings
        self.app = app
        self.concurrency = concurrency
        self.queues = tuple(queues or app.queues)
        self.selector = selector or settings.queue_selector
        resolve_selector(self.selector)  # a bad name fails here, not in every child
        self.limits = Limits(
            max_tasks=max_tasks_per_child or settings.max_tasks_per_child,
            max_memory_mb=max_memory_per_child_mb or settings.die_on_resident_set_size_mb,
        )
        self.shutdown_timeout = (
            settings.shutdown_timeout_sec if shutdown_timeout is None else shutdown_timeout
        )
        self.time_limit_grace = (
            settings.time_limit_grace_sec if time_limit_grace is None else time_limit_grace
        )
        self.processed = 0
        self._children: dict[int, _Child] = {}
        self._context = multiprocessing.get_context("fork")
        self._stopping_since: float | None = None
        self._cold = False
        self._started = False

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        """Import the task modules, configure the queues in the engine, start the children."""
        for module in self.app.settings.imports:
            importlib.import_module(module)  # before forking, so every child has the tasks
        configure_queues(self.app.engine, self.queues)
        self._started = True
        for _ in range(self.concurrency):
            self._spawn()
        logger.info(
            "pool started: %d processes, queues %s, selector %s",
            self.concurrency, ", ".join(q.name for q in self.queues), self.selector,
        )  # fmt: skip

    def run(self) -> None:
        """Start, then supervise until SIGTERM/SIGINT (call from the main thread)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start()
        while self._children:
            self.supervise(timeout=0.1)
        logger.info("pool stopped: %d jobs processed", self.processed)

    def supervise(self, timeout: float = 0.1) -> None:
        """One round: read children's reports, reap and replace, enforce time limits."""
        ready = wait(
            [child.conn for child in self._children.values()]
            + [child.process.sentinel for child in self._children.values()],
            timeout,
        )
        for child in list(self._children.values()):
            if child.conn in ready:
                self._read(child)
        for pid, child in list(self._children.items()):
            if not child.process.is_alive():
                self._reap(pid, child)
        self._enforce_time_limits()
        stopping = self._stopping_since is not None and not self._cold
        if stopping and time.monotonic() - (self._stopping_since or 0) >= self.shutdown_timeout:
            logger.warning("shutdown timeout of %g s passed: killing children",
                           self.shutdown_timeout)  # fmt: skip
            self._kill_all()

    def counts(self) -> PoolCounts:
        queued = 0
        for queue in self.queues:
            counts = self.app.engine.queue_counts(queue.name)
            queued += counts.waiting + counts.scheduled
        running = sum(1 for child in self._children.values() if child.running)
        return PoolCounts(queued, running, self.processed, len(self._children))

    def stop(self) -> None:
        """Warm shutdown: children finish their running task, give back the rest, exit."""
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            logger.info("warm shutdown: waiting up to %g s for running tasks",
                        self.shutdown_timeout)  # fmt: skip
            for child in self._children.values():
                _signal(child.process, signal.SIGTERM)

    def terminate(self, timeout: float | None = None) -> None:
        """Stop warm, wait up to `timeout` (default: shutdown_timeout), then kill what is left."""
        if timeout is not None:
            self.shutdown_timeout = timeout
        self.stop()
        while self._children:
            self.supervise(timeout=0.05)

    @property
    def children(self) -> list[int]:
        return sorted(self._children)

    # -- children -------------------------------------------------------------------------
    def _spawn(self) -> None:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child_main,
            args=(self.app, self.queues, self.selector, self.limits, send),
            name=f"lanner-worker-{len(self._children) + 1}",
            daemon=False,
        )
        # A child starts with the supervisor's signal handlers; a SIGTERM before it has
        # its own would run the supervisor's. Blocked here, such a signal waits for the
        # child's handler (the child unblocks once it is installed).
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        send.close()
        assert process.pid is not None
        self._children[process.pid] = _Child(
            process, receive, f"{socket.gethostname()}-{process.pid}"
        )

    def _read(self, child: _Child) -> None:
        try:
            while child.conn.poll():
                self._on_report(child, child.conn.recv())
        except (EOFError, OSError):
            pass  # the child is gone; _reap handles it

    def _on_report(self, child: _Child, report: Report) -> None:
        match report:
            case BatchPopped(queue, jids):
                child.queue, child.batch, child.succeeded = queue, list(jids), []
            case JobStarted():
                child.running = report
            case JobFinished(jid, succeeded):
                child.running = None
                if jid in child.batch:
                    child.batch.remove(jid)
                if succeeded:
                    child.succeeded.append(jid)
                self.processed += 1
            case BatchSettled():
                child.batch, child.succeeded = [], []
            case WorkerExiting(reason):
                child.exited_cleanly = True
                logger.info("worker %s exits: %s", child.worker, reason)

    def _reap(self, pid: int, child: _Child) -> None:
        self._read(child)
        child.process.join(timeout=1)
        del self._children[pid]
        child.conn.close()
        if not child.exited_cleanly or child.batch or child.running:
            self._recover(child)
        if self._stopping_since is None:
            self._spawn()

    def _recover(self, child: _Child) -> None:
        """Do at once what lock expiry would do later for a child that died mid-batch."""
        engine, queue, worker = self.app.engine, child.queue, child.worker
        code = child.process.exitcode
        cause = child.killed_for or f"worker process died (exit code {code})"
        logger.error("worker %s: %s; recovering its jobs", worker, cause)
        try:
            if child.succeeded:
                engine.complete_many(child.succeeded, worker, queue)
            if child.running is not None:
                jid, retry_delay = child.running.jid, child.running.retry_delay
                if self._cold and not child.killed_for:
                    engine.release([jid], worker, queue)  # shutdown, not the job's fault
                elif retry_delay is not None:
                    engine.retry(jid, queue, worker, retry_delay)
                else:
                    group = "TimeLimitExceeded" if child.killed_for else "lanner-worker-died"
                    engine.fail(jid, worker, group, cause)
            running = child.running.jid if child.running else None
            unstarted = [jid for jid in child.batch if jid != running]
            if unstarted:
                engine.release(unstarted, worker, queue)
            self._release_leftovers(child)
        except LannerError as error:
            logger.warning("recovering the jobs of %s: %s", worker, error)

    def _release_leftovers(self, child: _Child) -> None:
        """Give back whatever the engine still has locked for the dead worker, if it can tell.

        The reports cover what the child said; this covers what it could not say (a batch
        popped just before it died).
        """
        engine = self.app.engine
        if Capability.WORKERS not in engine.capabilities:
            return
        held = engine.worker_jobs(child.worker)
        leftovers = [*held.jobs, *held.stalled]
        for queue in self.queues:
            if leftovers:
                leftovers = [
                    jid for jid in leftovers
                    if jid not in engine.release(leftovers, child.worker, queue.name)
                ]  # fmt: skip

    def _enforce_time_limits(self) -> None:
        now = time.time()
        for child in self._children.values():
            if child.running is None or child.killed_for:
                continue
            jid, deadline = child.running.jid, child.running.deadline
            if now > deadline + self.time_limit_grace:
                child.killed_for = (
                    f"job {jid} ran {self.time_limit_grace:g} s past its time limit; "
                    "its process was killed"
                )
                logger.error("worker %s: %s", child.worker, child.killed_for)
                _signal(child.process, signal.SIGKILL)

    def _kill_all(self) -> None:
        self._cold = True
        for child in self._children.values():
            _signal(child.process, signal.SIGKILL)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping_since is None:
            logger.info("received %s", signal.Signals(signum).name)
            self.stop()
        elif not self._cold:
            logger.warning("second signal: cold shutdown, killing children")
            self._kill_all()


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _signal(process: BaseProcess, signum: int) -> None:
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)


def _child_main(
    app: App,
    queues: Sequence[QueueConfig],
    selector: str,
    limits: Limits,
    conn: Connection,
) -> None:
    # The supervisor owns Ctrl-C: a terminal's SIGINT reaches the whole process group,
    # and children must not die of it mid-task; they stop when the supervisor says so.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loop = WorkerLoop(
        app,
        queues,
        resolve_selector(selector),
        reporter=_PipeReporter(conn),
        limits=limits,
        configure=False,  # the supervisor did, once for all children
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: loop.stop())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if app.settings.on_worker_startup:
        app.settings.on_worker_startup()
    reason = loop.run()
    if app.settings.on_worker_shutdown:
        app.settings.on_worker_shutdown()
    conn.send(WorkerExiting(reason))
    conn.close()

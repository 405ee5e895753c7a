"""The worker pool: a supervisor process and N child processes, each running a WorkerLoop.

The supervisor
- starts N children (forked, each leading its own process group; child.py) and replaces
  any that exits or dies, pausing longer each time one dies young (a crash loop);
- recycles a child after `max_tasks_per_child` tasks or `max_memory_per_child_mb` of RSS
  (the child finishes its task, gives back its batch and exits; a new one starts);
- kills a child (its whole process group) whose task runs `time_limit_grace` seconds past
  its time limit (stuck in C code, or ignoring TimeLimitExceeded), or past the moment it
  was told to stop because its job was cancelled or its lock lost (JobCancelled);
- gives back a dead child's jobs at once instead of waiting for locks to expire
  (recovery.py), and completes the finished jobs of a child that stopped answering;
- on SIGTERM or SIGINT shuts down warm: children finish their running task within
  `shutdown_timeout` and give back the rest at once; on a second signal, or when the
  timeout passes, shuts down cold: children are killed and their jobs given back.

An observer (observer.py; the metrics of `lanner worker --metrics-port`) is told of each
job's end, of children, recycles, kills and engine errors, and asked before each fork
whether it may fork: nothing of its thread or socket may cross into a child.

It never waits on the store: what it owes the engine (the queues' settings, recoveries) is
done as chores (chores.py), between supervision rounds, and retried while the store is
away. Neither the supervisor nor a child exits because the store is unreachable; but a
store that refuses the configuration (a wrong password, a file that is not lanner's:
`StoreMisconfigured`), which waiting cannot fix, stops the pool, and `run` raises it.
"""

from __future__ import annotations

import contextlib
import functools
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
from typing import TYPE_CHECKING, Final

from lanner.engine import Capability, Engine
from lanner.engines import shown_url
from lanner.errors import StoreMisconfigured
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.worker.child import (
    STOP_SIGNALS,
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
    child_main,
)
from lanner.worker.chores import Chores
from lanner.worker.loop import Limits, configure_queues
from lanner.worker.observer import NoObserver, PoolObserver
from lanner.worker.outage import Backoff
from lanner.worker.processes import kill_group, process_alive
from lanner.worker.recovery import DeadWorker, orphans_of_host, recovery

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.pool")

SETTLE_FOR_CHILD_SEC: Final = 1.0
"""A child's finished jobs still not completed after this long (it was stopped, or is
stuck) are completed by the supervisor on its behalf, before their locks run out."""

YOUNG_DEATH_SEC: Final = 1.0
"""A child that dies younger than this, before starting a task, is replaced after a
growing pause."""

CHORE_LAST_TRY_SEC: Final = 1.0
"""At shutdown, chores get at least this long after the children are gone."""

RECYCLED: Final = ("max-tasks", "max-memory")
"""Why a child exits to be replaced (`WorkerLoop.run`'s reasons for the limits)."""


@dataclass(frozen=True, slots=True)
class PoolCounts:
    queued: int  # jobs waiting or scheduled in the pool's queues
    running: int  # jobs the children are running now
    processed: int  # jobs the children finished (succeeded or failed) since start
    children: int  # live child processes


@dataclass
class _Child:
    process: BaseProcess
    conn: Connection
    worker: str
    started_at: float = field(default_factory=time.monotonic)
    queue: str = ""
    batch: list[str] = field(default_factory=list)
    running: JobStarted | None = None
    finished: dict[str, float] = field(default_factory=dict)  # jid -> when; not completed
    exited_cleanly: bool = False
    killed_for: str = ""
    stopping: str = ""  # why its running job's task was told to stop (cancelled, ...)
    jobs_started: int = 0


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
        observer: PoolObserver | None = None,
    ) -> None:
        """`observer` is told what the pool does (lanner.metrics.pool.PoolMetrics)."""
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
        self._observer: PoolObserver = observer or NoObserver()
        self._chores = Chores(
            app,
            on_unavailable=lambda: self._observer.engine_error("supervisor"),
            on_refused=self._store_refused,
        )
        self.refused: StoreMisconfigured | None = None  # why the pool stopped, if it did
        self._stopping_since: float | None = None
        self._cold = False
        self._spawns_due: list[float] = []  # when children are to be started (monotonic)
        self._respawn = Backoff(first=0.5)

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        """Import the task modules, store the queues' settings, start the children."""
        for module in self.app.settings.imports:
            importlib.import_module(module)  # before forking, so every child has the tasks
        self._chores.add(
            "storing the queues' settings",
            lambda engine: configure_queues(engine, self.queues),
        )
        self._chores.add(
            "settling the jobs of this host's workers that died with their supervisor",
            orphans_of_host(socket.gethostname(), process_alive, self.app.settings.retry_delay),
        )
        self._chores.run()  # now if the store answers: children then pop with the right lock
        self._spawns_due = [time.monotonic()] * self.concurrency
        self._spawn_due()
        logger.info(
            "pool started: %d processes on %s, queues %s, selector %s", self.concurrency,
            shown_url(self.app.settings.broker), ", ".join(q.name for q in self.queues),
            self.selector,
        )  # fmt: skip

    def run(self) -> None:
        """Start, then supervise until SIGTERM/SIGINT (call from the main thread)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start()
        while self._children or self._stopping_since is None:
            self.supervise(timeout=0.1)
        self._finish_chores()
        self._observer.close()
        logger.info("pool stopped: %d jobs processed", self.processed)
        if self.refused is not None:
            raise self.refused

    def supervise(self, timeout: float = 0.1) -> None:
        """One round: read children's reports, reap and replace, enforce time limits, and
        do what is owed to the engine as far as the store allows."""
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
        self._settle_for_stalled_children()
        self._spawn_due()
        self._chores.run()
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
            self._spawns_due.clear()
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
        self._finish_chores()
        self._observer.close()

    @property
    def children(self) -> list[int]:
        return sorted(self._children)

    # -- children -------------------------------------------------------------------------
    def _spawn_due(self) -> None:
        if self._stopping_since is not None:
            self._spawns_due.clear()  # e.g. refused by the store at start: none may start
            return
        now = time.monotonic()
        due = [at for at in self._spawns_due if at <= now]
        if not due or not self._observer.ready_to_fork():
            return  # an observer not ready (stopping its thread) is asked again next round
        self._spawns_due = [at for at in self._spawns_due if at > now]
        try:
            for _ in due:
                self._spawn()
        finally:
            self._observer.forked()
            self._observer.children(len(self._children))

    def _spawn(self) -> None:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child_main,
            args=(self.app, self.queues, self.selector, self.limits, send),
            name=f"lanner-worker-{len(self._children) + 1}",
            daemon=False,
        )
        # A child starts with the supervisor's signal handlers; a SIGTERM before it has
        # its own would run the supervisor's. Blocked here, such a signal waits for the
        # child's handler (the child unblocks once it is installed).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        send.close()
        assert process.pid is not None
        # The child makes itself a group leader too; whichever runs first, the group exists
        # from here on, so a kill of the group never misses a child just started.
        with contextlib.suppress(OSError):
            os.setpgid(process.pid, process.pid)
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
                child.queue, child.batch = queue, list(jids)
            case JobStarted():
                child.running = report
                child.jobs_started += 1
            case JobStopping(jid, why) if child.running and child.running.jid == jid:
                # Killed after the grace unless its task stops: as if its time ran out now.
                child.running = child.running._replace(deadline=time.time())
                child.stopping = why
            case JobFinished():
                self._finished(child, report)
            case JobsCompleted(jids):
                for jid in jids:
                    child.finished.pop(jid, None)
            case BatchSettled():
                child.batch = []
            case WorkerExiting(reason):
                child.exited_cleanly = True
                logger.info("worker %s exits: %s", child.worker, reason)
                if reason in RECYCLED and self._stopping_since is None:
                    self._observer.recycled(reason)
            case EngineFailed():
                self._observer.engine_error("worker")
            case StoreRefused(error):
                self._store_refused(error)

    def _finished(self, child: _Child, report: JobFinished) -> None:
        child.running, child.stopping = None, ""
        if report.jid in child.batch:
            child.batch.remove(report.jid)
        if report.succeeded:
            child.finished[report.jid] = time.monotonic()
        self.processed += 1
        if report.outcome:
            self._observer.job_finished(child.queue, report.klass, report.outcome, report.seconds)

    def _reap(self, pid: int, child: _Child) -> None:
        self._read(child)
        child.process.join(timeout=1)
        kill_group(pid)  # what its tasks started dies with it
        del self._children[pid]
        child.conn.close()
        self._observer.children(len(self._children))
        if not child.exited_cleanly or child.batch or child.running or child.finished:
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
    def _crashed_young(child: _Child) -> bool:
        """Died of itself soon after it started, before any task: a crash loop (a bad
        import, a startup hook that fails), not a job's death, which the job's own retries
        pace, nor a kill from outside (SIGKILL), after which it is replaced at once."""
        young = time.monotonic() - child.started_at < YOUNG_DEATH_SEC
        killed = child.process.exitcode == -signal.SIGKILL and not child.killed_for
        return not child.exited_cleanly and young and child.jobs_started == 0 and not killed

    def _recover(self, child: _Child) -> None:
        """Give back what the dead child held (a chore: never waits on the store)."""
        code = child.process.exitcode
        cause = child.killed_for or f"worker process died (exit code {code})"
        running = f" running job {child.running.jid}" if child.running else ""
        logger.error("worker %s%s: %s; giving back its jobs", child.worker, running, cause)
        dead = DeadWorker(
            worker=child.worker,
            queue=child.queue,
            reported=tuple(child.batch),
            running=child.running,
            finished=tuple(child.finished),
            cause=cause,
            timed_out=bool(child.killed_for),
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
            overdue = [jid for jid, at in child.finished.items() if now - at > SETTLE_FOR_CHILD_SEC]
            if not overdue:
                continue
            for jid in overdue:
                del child.finished[jid]
            self._chores.add(
                f"completing {len(overdue)} finished job(s) of {child.worker}",
                functools.partial(_complete, jids=overdue, worker=child.worker, queue=child.queue),
            )

    def _enforce_time_limits(self) -> None:
        now = time.time()
        for pid, child in self._children.items():
            if child.running is None or child.killed_for:
                continue
            if now > child.running.deadline + self.time_limit_grace:
                late = f"{self.time_limit_grace:g} s"
                child.killed_for = (
                    f"job {child.running.jid} "
                    + (
                        f"did not stop {late} after {child.stopping}"
                        if child.stopping
                        else f"ran {late} past its time limit"
                    )
                    + "; its process was killed"
                )
                logger.error("worker %s: %s", child.worker, child.killed_for)
                kill_group(pid)
                self._observer.hard_killed()

    def _kill_all(self) -> None:
        self._cold = True
        for pid in self._children:
            kill_group(pid)

    def _finish_chores(self) -> None:
        """At shutdown, do what is owed while the store answers, until the shutdown timeout
        (counted from the stop: a shutdown never takes twice its timeout), and at least one
        short try."""
        since = self._stopping_since if self._stopping_since is not None else time.monotonic()
        deadline = max(since + self.shutdown_timeout, time.monotonic() + CHORE_LAST_TRY_SEC)
        while len(self._chores) and time.monotonic() < deadline:
            self._chores.run()
            time.sleep(0.05)
        if len(self._chores):
            logger.warning("%d chore(s) left undone: the store is away; their jobs come back "
                           "when their locks run out", len(self._chores))  # fmt: skip
        self._chores.close()

    def _store_refused(self, error: StoreMisconfigured) -> None:
        """Waiting cannot fix the store's refusal: stop (warm), for `run` to raise it."""
        if self.refused is None:
            self.refused = error
            logger.error("the store refuses the pool's configuration: stopping")
        self.stop()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping_since is None:
            logger.info("received %s", signal.Signals(signum).name)
            self.stop()
        elif not self._cold:
            logger.warning("second signal: cold shutdown, killing children")
            self._kill_all()


def _complete(engine: Engine, jids: list[str], worker: str, queue: str) -> None:
    if Capability.WORKERS not in engine.capabilities:
        logger.warning("the %s engine cannot complete jobs of %s from the supervisor: they run "
                       "again when their locks run out: %s", engine.name, worker, jids)  # fmt: skip
        return
    engine.complete_many(jids, worker, queue)


def _signal(process: BaseProcess, signum: int) -> None:
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)

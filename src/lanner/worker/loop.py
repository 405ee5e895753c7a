"""The worker loop of one process: Kale's loop on lanner's engine.

    forever:
        queue = selector.select(queues)                  # Reduced Lottery by default
                                                         # (with the queues' ages, for a
                                                         # selector that wants them)
        repeat num_iterations times:
            jobs = pop(queue, batch size)                # lock = visibility_timeout_sec;
                                                         # blocks up to long_poll_time_sec
            stop if none
            for each job, in order:
                give back the unstarted rest if the batch was held BATCH_HOLD_SEC
                (checked while a job is in hand, never between jobs)
                extend its lock first if its time limit would outlast it (the batch SLA)
                run it under its time limit, heartbeating its lock meanwhile
                success -> complete (within COMPLETE_WITHIN_SEC, batched);
                exception -> retry with backoff, or fail

The batch size adapts to how long the queue's jobs run: at most `batch_size`, and no
more than run in about BATCH_HOLD_SEC, so slow jobs are not held hostage by one process
while another is idle; fast ones still come ten to a pop. A job that cannot be decoded,
names an unknown task, has a bad signature, does not fit the task's arguments or is too
large never reaches a task: it fails into a `lanner-*` failure group with the reason, and
the rest of the batch runs. A store that is away is waited out (`outage.py`), never a
reason to exit; one that refuses the configuration (`StoreMisconfigured`) ends `run`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lanner.engine import Capability, Engine
from lanner.errors import (
    EngineUnavailable,
    LannerError,
    MalformedArgument,
    StoreMisconfigured,
    Unsupported,
)
from lanner.job import Job
from lanner.queues import QueueConfig
from lanner.selectors import QueueSelector, choose
from lanner.worker.batch import Batch
from lanner.worker.keeper import Keeper
from lanner.worker.outage import Outage
from lanner.worker.processes import rss_mb
from lanner.worker.reporter import NoReporter, Reporter
from lanner.worker.running import JobRunning

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.worker")

READY_CACHE_SEC = 0.5
"""How long the set of queues with work is reused before asking the engine again."""

POP_SLICE_SEC = 0.5
"""A long poll is split into pops this long, so a stop request is seen within it."""

COMPLETE_WITHIN_SEC = 0.1
"""Finished jobs are completed at most this long after they finish (or at the batch's end),
so a process killed or stopped repeats at most its running job and those of this window."""

HOLDER_PAUSE_SEC = 0.25
"""The longest pause, while the store is away, of a process holding jobs that ran and are
not completed yet."""

BATCH_HOLD_SEC = 0.1
"""How long a process may hold popped jobs it has not started: past it, the unstarted rest
of a batch is given back for an idle process to start now, and later batches of the queue
shrink to what runs in this time."""

_RUNTIME_WEIGHT = 0.3  # of the latest job in the running mean of a queue's run time


def worker_name() -> str:
    """`<hostname>-<pid>`, as qless names workers."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Limits:
    max_tasks: int | None = None
    max_memory_mb: int | None = None


class WorkerLoop(JobRunning):
    """Runs jobs from `queues` until `stop()` or a limit; one per process."""

    outage_first_pause = 0.5
    """Seconds before the first retry when the engine is unavailable (then doubling)."""

    def __init__(
        self,
        app: App,
        queues: Sequence[QueueConfig],
        selector: QueueSelector,
        *,
        worker: str | None = None,
        reporter: Reporter | None = None,
        limits: Limits | None = None,
        configure: bool = True,
        on_error: Callable[[Job, BaseException], None] | None = None,
        give_back_held: bool = True,
        supervisor: int | None = None,
    ) -> None:
        """`configure=False`: the queues' settings are already in the engine (a pool stores
        them once for all its processes). `on_error(job, error)` is told of each task
        error, and of each job that could not reach its task (as a `TaskFailed`), after
        the job was retried or failed as usual. `give_back_held=False`: a batch is run
        whole however long it is held (`drain`: no other process would start it sooner,
        and what runs must not depend on the machine's speed). `supervisor`: the pid of
        the process that supervises this one (default, with a `reporter`: the parent's
        now); once it is gone, the loop stops as if told to (`orphaned`)."""
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.app = app
        self.queues = list(queues)
        self.selector = selector
        self.worker = worker or worker_name()
        self.reporter = reporter or NoReporter()
        self.limits = limits or Limits()
        self.processed = 0
        self._pid = os.getpid()
        if supervisor is None and reporter is not None:
            supervisor = os.getppid()
        self._supervisor = supervisor
        self._stopping = False
        self._ready: tuple[float, frozenset[str]] = (0.0, frozenset())
        self._keeper = Keeper(lambda: self.engine, self.worker)
        self._configured = not configure
        self._on_error = on_error
        self._give_back_held = give_back_held
        self._runtime: dict[str, float] = {}  # queue -> running mean of its jobs' run time
        # Jobs that ran but could not be completed (the store was away), by queue, with
        # the results they keep.
        self._undone: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._undone_lock = threading.Lock()
        self._settling = threading.Lock()  # held while completions are being stored
        self._in_job = False  # whether the loop is in a job's run (the keeper reads it)

    @property
    def engine(self) -> Engine:
        """The app's engine, opened at first use: inside `run`, so that a store away at
        start is waited out like any other outage."""
        return self.app.engine

    def stop(self) -> None:
        """Finish the running task, give back the rest of the batch, then return from run()."""
        self._stopping = True

    def close(self) -> None:
        """Stop the keeper thread; the loop is not run again (the engine stays open)."""
        self._keeper.stop()

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> str:
        """Run until stopped or a limit is reached; return why ('stopped', 'max-tasks', ...).
        A store that refuses the configuration raises `StoreMisconfigured`."""
        outage = Outage(self.app.settings.broker, self.outage_first_pause)
        reason: str | None = None
        while not self._stopping and reason is None:
            if self._orphaned():
                reason = "orphaned"  # checked each round: an idle loop never reaches a limit
                break
            try:
                if not self._configured:
                    configure_worker_queues(self.engine, self.queues)
                    self._configured = True
                self.complete_done()
                reason = self._round()
            except StoreMisconfigured:
                raise  # waiting cannot fix it: the caller stops (a pool: every process)
            except LannerError as error:
                # The store is away (or refuses us): wait and try again, rather than die and
                # be replaced in a loop. Finished jobs are completed once it is back; jobs
                # popped and not started come back to the queue when their locks expire.
                outage.failed(error)
                self.reporter.engine_error()
                # Jobs that ran but are not completed must be completed before their
                # expired locks' grace period ends after the store is back, or they run
                # again elsewhere: their holder keeps trying often.
                holding = bool(self._undone)
                outage.backoff.sleep(
                    lambda: self._stopping or self._orphaned(),
                    HOLDER_PAUSE_SEC if holding else float("inf"),
                )
                continue
            outage.ended()
        try:
            self.complete_done()
        except LannerError as error:
            logger.warning("finished jobs not completed (%s): they will run again", error)
        return reason or "stopped"

    def _round(self) -> str | None:
        """Select a queue and work it for up to num_iterations batches; a limit's name if hit."""
        queue = self.select()
        # Block only on a queue chosen while none had work; a queue that runs dry
        # mid-round sends the worker back to the selector, not into a long poll.
        block = queue.name not in self.ready_queues()
        for _ in range(queue.num_iterations):
            jobs = self._pop(queue, block)
            if not jobs:
                self._ready = (0.0, frozenset())  # stale: ask the engine next time
                return None
            block = False
            self.run_batch(queue, jobs)
            reason = self.limit_reached()
            if reason or self._stopping:
                return reason
        return None

    def select(self) -> QueueConfig:
        """Ask the selector for the next queue; with the queues' ages if it wants them."""
        return choose(self.selector, self.queues, self.ready_queues, self.queue_ages)

    def queue_ages(self) -> dict[str, float]:
        """Per queue with work (as `ready_queues` says), how long its next job has been ready,
        in seconds: one peek per such queue, made only for a selector that asks. A queue
        found empty is left out; so is every queue if the engine cannot peek."""
        engine = self.engine
        if Capability.LISTING not in engine.capabilities:
            return {}
        names = self.ready_queues()
        now = time.time()
        ages: dict[str, float] = {}
        for queue in self.queues:
            if queue.name not in names:
                continue
            jobs = engine.peek(queue.name, 1)
            if jobs:
                job = jobs[0]
                since = job.due if job.due is not None else job.expires  # a stalled job's lock
                ages[queue.name] = max(0.0, now - since)
        return ages

    def ready_queues(self) -> frozenset[str]:
        """Names of the queues with work, from one engine call reused for a moment."""
        fetched_at, names = self._ready
        if time.monotonic() - fetched_at > READY_CACHE_SEC:
            names = frozenset(
                counts.name
                for counts in self.engine.queues()
                if (counts.waiting or counts.stalled) and not counts.paused
            )
            self._ready = (time.monotonic(), names)
        return names

    def _pop(self, queue: QueueConfig, block: bool, count: int | None = None) -> list[Job]:
        """Up to `count` jobs (default: `batch_size`); a long poll if `block`."""
        deadline = time.monotonic() + (queue.long_poll_time_sec if block else 0.0)
        count = count or self.batch_size(queue)
        while True:
            wait = max(0.0, min(POP_SLICE_SEC, deadline - time.monotonic()))
            jobs: list[Job] = self.engine.pop(queue.name, self.worker, count, wait=wait)
            if jobs or self._stopping or time.monotonic() >= deadline:
                return jobs
            if self.limit_reached():
                return []

    def limit_reached(self) -> str | None:
        if self._orphaned():
            return "orphaned"
        if self.limits.max_tasks is not None and self.processed >= self.limits.max_tasks:
            return "max-tasks"
        if self.limits.max_memory_mb is not None and rss_mb() >= self.limits.max_memory_mb:
            return "max-memory"
        return None

    def _orphaned(self) -> bool:
        """Whether the supervisor is gone (this process has another parent now): nobody
        would replace or stop it, so it stops (after its running task)."""
        if self._supervisor is not None and os.getppid() != self._supervisor:
            self._stopping = True
            return True
        return False

    def batch_size(self, queue: QueueConfig) -> int:
        """How many jobs to pop: `batch_size`, or what runs in about BATCH_HOLD_SEC."""
        runtime = self._runtime.get(queue.name)
        if not runtime:
            return queue.batch_size
        return max(1, min(queue.batch_size, int(BATCH_HOLD_SEC / runtime)))

    def run_batch(self, queue: QueueConfig, jobs: Sequence[Job]) -> None:
        self.reporter.batch(queue.name, [job.jid for job in jobs])
        batch = Batch(queue.name, jobs)
        self._keeper.keep(lambda: self._keep(batch))
        try:
            while (job := batch.take()) is not None:
                self._check_settled()
                if self._stopping or self.limit_reached():
                    rest = [job, *batch.take_rest()]
                    self._release([j.jid for j in rest], queue.name, "worker stopping")
                    break
                started = time.monotonic()
                self._in_job = True
                try:
                    self.run_job(queue, job, batch)
                finally:
                    self._in_job = False
                self._learn(queue.name, time.monotonic() - started)
                if batch.done_for() >= COMPLETE_WITHIN_SEC:
                    self._complete(batch)
        except BaseException:
            # Even when cut short (by the store, or a task's SystemExit): what ran must not
            # run again. A failure to complete it now is not the error to report.
            self._keeper.keep(None)
            with contextlib.suppress(LannerError):
                self._complete(batch)
            raise
        self._keeper.keep(None)
        self._complete(batch)
        # Only a batch that ended normally is settled; otherwise the supervisor still
        # knows its unstarted jobs and gives them back when this process dies.
        self.reporter.flushed()

    def _check_settled(self) -> None:
        """No new job starts while finished ones wait for the store (after a completion
        in flight ends): what is not started cannot run twice."""
        with self._settling:
            pass
        if self._undone:
            raise EngineUnavailable("jobs that ran wait to be completed: no new job starts")

    def _keep(self, batch: Batch) -> None:
        """The keeper's duty while a batch is in hand: no batch held hostage, nothing run
        twice. Only jobs waiting behind one in hand are hostages: between jobs the loop
        starts the next one itself, sooner than another process could pop it, so a loop
        that is merely slow to get there (a loaded machine) gives nothing back."""
        held = time.monotonic() - batch.popped_at
        hostage = self._in_job and batch.unstarted()
        if self._give_back_held and hostage and held > BATCH_HOLD_SEC:
            rest = [job.jid for job in batch.take_rest()]
            if rest:
                why = f"held {BATCH_HOLD_SEC:g} s: for a process that can start them now"
                self._release(rest, batch.queue, why)
        if batch.done_for() >= COMPLETE_WITHIN_SEC:
            self._complete(batch)

    def _learn(self, queue: str, seconds: float) -> None:
        mean = self._runtime.get(queue)
        self._runtime[queue] = (
            seconds if mean is None else mean + _RUNTIME_WEIGHT * (seconds - mean)
        )

    def _complete(self, batch: Batch) -> None:
        jids, results = batch.take_done()
        if jids:
            self._settle(batch.queue, jids, results)

    def _settle(self, queue: str, jids: list[str], results: dict[str, str]) -> None:
        """Complete jobs that ran; kept for a later try if the store is away."""
        try:
            with self._settling:
                done = self.engine.complete_many(jids, self.worker, queue, results=results or None)
        except MalformedArgument:
            # Refused as sent, nothing changed: not an outage, and not kept for a later
            # try, which would be refused again while no new job starts.
            raise
        except LannerError:
            with self._undone_lock:
                jobs, kept = self._undone.setdefault(queue, ([], {}))
                jobs.extend(jids)
                kept.update(results)
            raise
        self.reporter.completed(jids)
        if len(done) < len(jids):
            moved_on = sorted(set(jids) - set(done))
            logger.warning(
                "job(s) not completed by this process, their locks had moved on "
                "(run elsewhere, or completed by the supervisor): %s",
                moved_on,
            )

    def complete_done(self) -> None:
        """Complete the jobs that ran while the store was away."""
        with self._undone_lock:
            undone, self._undone = self._undone, {}
        for queue, (jids, results) in undone.items():
            self._settle(queue, jids, results)

    def _release(self, jids: list[str], queue: str, why: str, delay: float = 0.0) -> None:
        released = self.engine.release(jids, self.worker, queue, delay=delay)
        if released:
            logger.info("released %d job(s) (%s): %s", len(released), why, released)


def configure_worker_queues(engine: Engine, queues: Sequence[QueueConfig]) -> None:
    """`configure_queues` for a worker or pool: a bound or cap the engine cannot keep is
    `StoreMisconfigured`, which stops it, not an outage it waits out."""
    try:
        configure_queues(engine, queues)
    except Unsupported as error:
        raise StoreMisconfigured(str(error)) from None


def configure_queues(engine: Engine, queues: Sequence[QueueConfig]) -> None:
    """Store the queues' settings the engine applies: lock duration, concurrency cap, bounds.

    Bounds or a concurrency cap on an engine that cannot keep them are refused
    (`Unsupported`): a queue meant to stay bounded, or capped, must not run without."""
    for queue in queues:
        limits = queue.limits()
        if limits and Capability.LIMITS not in engine.capabilities:
            raise Unsupported(engine.name, f"queue {queue.name}: {', '.join(limits)}", "limits")
        if queue.max_concurrency and Capability.MAX_CONCURRENCY not in engine.capabilities:
            raise Unsupported(engine.name, f"queue {queue.name}: max_concurrency",
                              Capability.MAX_CONCURRENCY.value)  # fmt: skip
        for key, value in limits.items():
            engine.config_set(key, value)
        # The lock a pop takes is the queue's batch SLA.
        engine.config_set(f"{queue.name}-heartbeat", queue.visibility_timeout_sec)
        if queue.max_concurrency:
            engine.config_set(f"{queue.name}-max-concurrency", queue.max_concurrency)

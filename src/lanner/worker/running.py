"""One job of the worker loop (`JobRunning`, a part of `WorkerLoop`): from its pop to
its outcome.

Admitted first (admission.py: a job that cannot reach its task fails into a `lanner-*`
group), its lock extended if its time limit would outlast it, asked `should_run_task`,
held until its start window if a rate limit counted it (rates.py: given back unspent if
it cannot start in time), then run under its time limit with the keeper heartbeating its
lock; a success is left to its batch to complete, a failure is retried or failed by its
task's policy (failures.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lanner import context, instruments, progress
from lanner.codec import encode_result
from lanner.engine import Capability, Engine
from lanner.errors import JobCancelled, JobNotFound, LockLost, TaskFailed, TimeoutException
from lanner.instruments import Run
from lanner.job import Job
from lanner.queues import QueueConfig
from lanner.task import Task
from lanner.worker import failures, interrupt, rates
from lanner.worker.admission import Rejected, admit
from lanner.worker.batch import Batch
from lanner.worker.keeper import Keeper, lock_needed
from lanner.worker.processes import kill_strays
from lanner.worker.reporter import Outcome, Reporter

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.worker")

Ended = tuple[Outcome, BaseException | None]
"""How a run ended, and what its task raised (for the app's instruments)."""


_RATE_MARK = '"start"'
"""In a job's history JSON only if a pop gave it a start window (a rate-limited run)."""


def start_window(job: Job) -> rates.Window | None:
    """`rates.start_window`, without decoding the history of a job that has none (almost
    every job: the decoding was about a tenth of a no-op job's CPU in the worker)."""
    return rates.start_window(job) if _RATE_MARK in job.history_json else None


class JobRunning:
    """The part of `WorkerLoop` that runs one popped job."""

    if TYPE_CHECKING:
        app: App
        worker: str
        reporter: Reporter
        processed: int
        _keeper: Keeper
        _on_error: Callable[[Job, BaseException], None] | None
        _pid: int

        @property
        def engine(self) -> Engine: ...

        def _release(self, jids: list[str], queue: str, why: str, delay: float = 0.0) -> None: ...

    def run_job(self, queue: QueueConfig, job: Job, batch: Batch) -> None:
        """Run one job; if it succeeds, its completion is left to the batch."""
        engine = self.engine
        token = context.running_job(job, engine)
        try:
            try:
                task_class, payload, args, kwargs = admit(job, engine.max_data_bytes, self.app)
            except Rejected as rejected:
                logger.error("job %s (%s) cannot run: %s", job.jid, job.klass, rejected.message)
                self._fail(job, rejected.group, rejected.message)
                self.reporter.finished(job.jid, False, "failed", job.klass)
                if self._on_error is not None:
                    self._on_error(job, TaskFailed(job.jid, rejected.group, rejected.message))
                return
            needed = lock_needed(task_class.time_limit, queue.visibility_timeout_sec)
            if time.time() + needed > job.expires and not self._extend(job):
                return
            try:
                task = task_class(job, payload)
                run_now = task.should_run_task(*args, **kwargs)
            except Exception as error:  # the task's own code: handled like run_task's errors
                outcome = self._after_failure(task_class, None, job, error)
                self.reporter.finished(job.jid, False, outcome, job.klass)
                return
            if not run_now:
                deferrals = sum(1 for event in job.history if event.what == "released")
                self._release([job.jid], job.queue, "should_run_task() said no",
                              delay=self.app.settings.retry_delay(deferrals))  # fmt: skip
                return
            window = start_window(job)
            if window is not None and not rates.hold(window):
                self._release([job.jid], job.queue, rates.LATE)
                return
            if not self.app.instruments:
                self._execute(queue, job, task, args, kwargs, batch)
                return
            with instruments.running(self.app, Run(job, task_class, payload.headers or {})) as run:
                run.outcome, run.error = self._execute(queue, job, task, args, kwargs, batch)
        finally:
            context.reset(token)

    def _extend(self, job: Job) -> bool:
        """Extend the lock of a job whose time limit would outlast it; False if it is lost.

        The keeper thread keeps extending it while the task runs, so a time limit longer
        than the queue's lock is run, not given back and popped again forever.
        """
        try:
            self.engine.heartbeat(job.jid, self.worker)
        except (LockLost, JobNotFound) as lost:
            logger.warning("job %s not run: its lock was lost before it started (%s)",
                           job.jid, lost)  # fmt: skip
            return False
        return True

    def _execute(
        self,
        queue: QueueConfig,
        job: Job,
        task: Task,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        batch: Batch,
    ) -> Ended:
        """Run the task; how it ended, and what it raised."""
        retry_delay = self._retry_delay(job)
        limit = task.time_limit
        deadline = float("inf") if limit is None else time.time() + limit
        self.reporter.started(job.jid, deadline, retry_delay)
        self._keeper.watch(job.jid, queue.visibility_timeout_sec, self._stop_task)
        started = time.monotonic()
        try:
            armed = interrupt.arm(job.jid, limit)
            try:
                value = task.run(*args, **kwargs)
            finally:
                if armed:
                    interrupt.disarm(limit)
            progress.finish(self.engine, job.jid)
            result = self._result(task, value)
        except (Exception, SystemExit, KeyboardInterrupt) as error:  # the task's, all of them
            self._exit_if_forked()
            progress.finish(self.engine, job.jid)
            self._keeper.watch(None)  # before retry/fail: no heartbeat of a released lock
            if isinstance(error, TimeoutException | JobCancelled) and (killed := kill_strays()):
                logger.warning("killed %d process(es) job %s left running", killed, job.jid)
            outcome = self._after_failure(type(task), task, job, error)
            ran = time.monotonic() - started
            self.reporter.finished(job.jid, False, outcome, job.klass, ran)
            return outcome, error
        finally:
            self._exit_if_forked()
            self._keeper.watch(None)
            self.processed += 1
        ran = time.monotonic() - started
        logger.debug("job %s (%s) done in %.3f s", job.jid, job.klass, ran)
        # Reported before the batch may complete it (the keeper can, at once): the
        # supervisor must hear of the end before the completion, or it waits for a
        # completion it already had, and takes the child's clean exit for a death.
        self.reporter.finished(job.jid, True, "completed", job.klass, ran)
        batch.ran(job.jid, result)
        return "completed", None

    def _stop_task(self, jid: str, why: str) -> None:
        """The keeper's word that the running job is no longer this worker's: stop its task
        (`JobCancelled`), and tell the supervisor, which kills it if it does not stop."""
        if interrupt.stop(jid, JobCancelled(f"job {jid}: {why}")):
            logger.warning("job %s: %s; its task is stopped", jid, why)
            self.reporter.stopping(jid, why)

    def _result(self, task: Task, value: Any) -> str | None:
        """What the job keeps of its task's return value: JSON text, if the task keeps one
        and the engine can (`ResultError` if it cannot travel as JSON or the engine would
        refuse it: checked here, so that it fails its own job, not its batch's completion)."""
        task_class = type(task)
        keeps = task_class.keeps_result(self.app) or getattr(task, "in_workflow", False)
        if not keeps or Capability.RESULTS not in self.engine.capabilities:
            return None
        return encode_result(value, task_class.name, self.engine.max_data_bytes)

    def _exit_if_forked(self) -> None:
        """A copy of this process a task forked, back from the task: it must never act as
        the worker (complete, release, pop): it leaves at once, touching nothing."""
        if os.getpid() != self._pid:
            os._exit(0)

    def _retry_delay(self, job: Job) -> float | None:
        """How long to wait before retrying this job if it fails now; None: it fails for good.

        The job's own budget decides (set at publish from max_retries, or given explicitly),
        and its task's `_get_delay_sec_for_retry` the delay (failures.py).
        """
        return failures.retry_delay(self.app, job)

    def _after_failure(
        self, task_class: type[Task], task: Task | None, job: Job, error: BaseException
    ) -> Outcome:
        """Settle a failed run; how it ended: retried, failed, or stopped."""
        if isinstance(error, JobCancelled):
            logger.info("job %s stopped: %s", job.jid, error)
            return "stopped"  # gone, or another worker's now: nothing of this run is kept
        settled = self._settle_failure(task_class, task, job, error)
        if self._on_error is not None:
            self._on_error(job, error)
        return "failed" if settled.permanent else "retried"

    def _settle_failure(
        self, task_class: type[Task], task: Task | None, job: Job, error: BaseException
    ) -> failures.SettledFailure:
        """Retry the job, or fail it into its group, as its task's `handle_failure` says."""
        return failures.settle_failure(
            self.app, self.engine, self.worker, task_class, task, job, error
        )

    def _fail(self, job: Job, group: str, message: str) -> None:
        failures.fail(self.engine, self.worker, job, group, message)

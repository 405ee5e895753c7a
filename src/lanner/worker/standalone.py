"""`Worker`: Kale's worker (`kale.worker.Worker().run()`) as a thin front on lanner's loop.

    from lanner import worker          # was: from kale import worker

    worker.Worker().run()

One process runs one task at a time, as Kale's does, with no supervisor: the `WorkerLoop`
of a pool's child, on the configured app (`default_app()`: LANNER_SETTINGS_MODULE or
KALE_SETTINGS_MODULE, LANNER_BROKER...), its queues and selector. SIGTERM or SIGINT stops
it warm: the running task finishes, the unstarted rest of its batch is given back at once,
and `run()` returns. A second signal stops the running task too (`JobCancelled` raised in
it) and gives its job back without spending a retry. A memory past
DIE_ON_RESIDENT_SET_SIZE_MB ends the process with status 1, as Kale's, for whatever runs
it to start a new one.

Kale's hook methods are called where Kale calls them, for subclasses to override:
`_on_pre_run_worker()`, `_on_pre_batch_run(messages)`,
`_on_post_batch_run(num_completed, num_incomplete, messages)`,
`_on_task_succeeded(message, time_remaining_sec)`,
`_on_task_failed(message, time_remaining_sec, err, permanent_failure)`,
`_on_permanent_failure_batch()`, `_on_shutdown(num_completed, num_incomplete)` and
`_on_exceeding_memory_limit(ru_maxrss_mb)`. The messages are `lanner.message.KaleMessage`s
(one per job of the batch, the same object throughout). Kale's `_on_task_deferred` and
`_on_sigtstp` have no counterpart: lanner extends a job's lock rather than defer it, and
leaves SIGTSTP alone; nor do the Worker's `should_run_task` and `run_task` (override the
Task's hooks instead).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from lanner.errors import JobCancelled, LannerError
from lanner.message import KaleMessage
from lanner.selectors import QueueSelector, resolve_selector
from lanner.task import Task
from lanner.worker import failures, interrupt
from lanner.worker.batch import Batch
from lanner.worker.child import STOP_SIGNALS
from lanner.worker.loop import Limits, WorkerLoop
from lanner.worker.processes import rss_mb
from lanner.worker.running import Ended

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.job import Job
    from lanner.queues import QueueConfig

logger = logging.getLogger("lanner.worker")

__all__ = ["Worker"]


class Worker:
    """Kale's single-process worker (module docstring). Subclass it to override its hooks."""

    def __init__(
        self,
        app: App | None = None,
        *,
        queues: Sequence[QueueConfig] | None = None,
        selector: str | None = None,
    ) -> None:
        """`app`: default, the process's default app (built from configuration); a given
        one becomes the default, so Kale-style tasks publish where the worker runs.
        `queues`: default, the app's (its queue config, and the queues of its tasks).
        `selector`: default, the settings' QUEUE_SELECTOR."""
        from lanner.app import default_app, set_default_app

        if app is not None:
            set_default_app(app)
        self.app = app or default_app()
        settings = self.app.settings
        for module in settings.imports:
            importlib.import_module(module)
        self.queues = tuple(queues) if queues is not None else self.app.served_queues()
        self._loop = _HookedLoop(
            self,
            self.queues,
            resolve_selector(selector or settings.queue_selector),
            Limits(max_memory_mb=settings.die_on_resident_set_size_mb),
        )
        self._batch_queue: QueueConfig | None = None  # Kale's name: the queue being worked
        self._permanent_failures: list[KaleMessage] = []  # of the batch being worked
        self._last_batch = (0, 0)  # (completed, incomplete) of the latest batch
        self._signals = 0
        if settings.on_worker_startup is not None:
            settings.on_worker_startup()  # as Kale: when the worker is made

    @property
    def _total_messages_processed(self) -> int:
        """Kale's name: the tasks run so far, successful or not."""
        return self._loop.processed

    def run(self) -> None:
        """Run tasks until SIGTERM or SIGINT (call from the main thread)."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        try:
            self._on_pre_run_worker()
            reason = self._loop.run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._loop.close()
        on_shutdown = self.app.settings.on_worker_shutdown
        if on_shutdown is not None:
            on_shutdown()
        if reason == "max-memory":
            self._on_exceeding_memory_limit(int(rss_mb()))
            sys.exit(1)  # non-zero: whatever runs the worker starts a fresh one
        self._on_shutdown(*self._last_batch)

    def stop(self) -> None:
        """Stop as a first SIGTERM does: finish the running task, give back the rest."""
        self._loop.stop()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info("signal %d: finishing the running task, giving back the rest", signum)
            self._loop.stop()
            return
        running = self._loop.running
        if running is not None and running.task_id is not None:
            logger.warning("signal %d again: stopping job %s", signum, running.task_id)
            self._loop.give_back_when_stopped = running.task_id
            interrupt.stop(running.task_id, JobCancelled("the worker was stopped"))

    # -- Kale's hooks: logging only, unless overridden ------------------------------------
    def _on_pre_run_worker(self) -> None:
        """At the start of `run()`."""
        logger.info("worker %s started: queues %s", self._loop.worker,
                    ", ".join(queue.name for queue in self.queues))  # fmt: skip

    def _on_exceeding_memory_limit(self, ru_maxrss_mb: int) -> None:
        """Before the process exits for its memory (after ON_WORKER_SHUTDOWN)."""
        logger.info("memory of %d MB exceeds DIE_ON_RESIDENT_SET_SIZE_MB %s: exiting",
                    ru_maxrss_mb, self.app.settings.die_on_resident_set_size_mb)  # fmt: skip

    def _on_shutdown(self, num_completed: int, num_incomplete: int) -> None:
        """After a stop (after ON_WORKER_SHUTDOWN), with the last batch's counts: tasks
        that ran, and jobs given back without running."""
        logger.info("worker shutting down; last batch: %d completed, %d incomplete",
                    num_completed, num_incomplete)  # fmt: skip

    def _on_pre_batch_run(self, messages: list[KaleMessage]) -> None:
        """Before a batch popped from `self._batch_queue` runs."""
        logger.debug("batch of %d from queue %s", len(messages), self._queue_name)

    def _on_post_batch_run(
        self, num_completed: int, num_incomplete: int, messages: list[KaleMessage]
    ) -> None:
        """After a batch: the tasks that ran (succeeded or failed), and the jobs given back
        or deferred without running."""
        logger.debug("batch done: %d completed, %d incomplete", num_completed, num_incomplete)

    def _on_permanent_failure_batch(self) -> None:
        """After a batch in which runs failed for good (`self._permanent_failures`)."""
        logger.info("%d job(s) of queue %s failed for good (see `lanner failed`)",
                    len(self._permanent_failures), self._queue_name)  # fmt: skip

    def _on_task_failed(
        self,
        message: KaleMessage,
        time_remaining_sec: float,
        err: BaseException,
        permanent_failure: bool,
    ) -> None:
        """After a failed run was retried or failed (`permanent_failure`).
        `time_remaining_sec`: what is left of the batch's lock (its SLA)."""
        logger.debug("task failed: %s; queue %s; %d s left", message.task_id, self._queue_name,
                     time_remaining_sec)  # fmt: skip

    def _on_task_succeeded(self, message: KaleMessage, time_remaining_sec: float) -> None:
        """After a successful run."""
        logger.debug("task succeeded: %s; queue %s; %d s left", message.task_id,
                     self._queue_name, time_remaining_sec)  # fmt: skip

    @property
    def _queue_name(self) -> str:
        return self._batch_queue.name if self._batch_queue is not None else "-"


class _HookedLoop(WorkerLoop):
    """The loop, calling its `Worker`'s hooks around batches and runs."""

    def __init__(
        self, front: Worker, queues: Sequence[QueueConfig], selector: QueueSelector, limits: Limits
    ) -> None:
        # No reporter: a loop given one takes itself for a pool's child, which stops once
        # its parent is gone; this one has no parent to lose. Whether a task succeeded is
        # the outcome `_execute` returns.
        super().__init__(front.app, queues, selector, limits=limits)
        self.front = front
        self.running: KaleMessage | None = None
        self.give_back_when_stopped: str | None = None  # jid a second signal stopped
        self._messages: dict[str, KaleMessage] = {}
        self._stop_at = 0.0  # monotonic: when the batch's lock runs out
        self._ran = 0  # tasks of the batch that ran, successfully or not

    def run_batch(self, queue: QueueConfig, jobs: Sequence[Job]) -> None:
        front = self.front
        front._batch_queue = queue
        front._permanent_failures = []
        messages = [failures.job_message(job, self.app) for job in jobs]
        self._messages = {job.jid: message for job, message in zip(jobs, messages, strict=True)}
        self._stop_at = time.monotonic() + queue.visibility_timeout_sec
        self._ran = 0
        front._on_pre_batch_run(messages)
        super().run_batch(queue, jobs)
        front._last_batch = (self._ran, len(jobs) - self._ran)
        front._on_post_batch_run(self._ran, len(jobs) - self._ran, messages)
        if front._permanent_failures:
            front._on_permanent_failure_batch()

    def _execute(
        self,
        queue: QueueConfig,
        job: Job,
        task: Task,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        batch: Batch,
    ) -> Ended:
        message = self._message(job)
        message.task_inst = task
        self.running = message
        try:
            ended = super()._execute(queue, job, task, args, kwargs, batch)
        finally:
            self.running = None
        if ended[0] == "completed":
            self._ran += 1
            self.front._on_task_succeeded(message, self._time_remaining())
        elif self.give_back_when_stopped == job.jid:
            # Stopped by a second signal, not by a fault of its own: back at once, as is.
            with contextlib.suppress(LannerError):
                self.engine.release([job.jid], self.worker, job.queue)
        return ended

    def _settle_failure(
        self, task_class: type[Task], task: Task | None, job: Job, error: BaseException
    ) -> failures.SettledFailure:
        settled = failures.settle_failure(
            self.app, self.engine, self.worker, task_class, task, job, error, self._message(job)
        )
        self._ran += 1
        if settled.permanent:
            self.front._permanent_failures.append(settled.message)
        self.front._on_task_failed(settled.message, self._time_remaining(), error,
                                   settled.permanent)  # fmt: skip
        return settled

    def _message(self, job: Job) -> KaleMessage:
        message = self._messages.get(job.jid)
        if message is None:  # a job run outside run_batch: made now
            message = self._messages[job.jid] = failures.job_message(job, self.app)
        return message

    def _time_remaining(self) -> float:
        return self._stop_at - time.monotonic()

"""Settling a failed run: its task's `handle_failure` decides, the engine carries it out.

The loop hands over a job whose task raised. The job becomes a `KaleMessage`
(`job_message`) bound to this worker's hold on it (`JobSettlement`), and the task class's
`handle_failure` runs with that message being settled. Kale's default policy retries
through `republish`, whose publish of the same task id retries the held job in place
(`engine.retry`, or `engine.release` when no failure is counted); the backoff comes from
`_get_delay_sec_for_retry`. A subclass overriding any of them changes what happens.

What `handle_failure` leaves unsettled is settled after it: a job it returned False for
(a permanent failure) fails into its exception's group (`lanner.errors.exception_group`)
with the traceback; a job it returned True for without putting it back through lanner
(it published a follow-up of its own, say) is completed, as Kale deletes the message. A
`handle_failure` that raises fails the job, with both tracebacks. A task's return value
JSON cannot carry, or the engine would not keep (`ResultError`, `ResultTooLarge`), fails
the job into its own group at once: the run succeeded, and running it again would not help.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lanner import instruments
from lanner.codec import JobIdentity, decode
from lanner.errors import DecodeError, LannerError, ResultError, exception_group
from lanner.message import KaleMessage, settling
from lanner.task import Task, find_task
from lanner.workflows.inputs import failure_result, settles_by_completing

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.engine import Engine
    from lanner.job import Job

logger = logging.getLogger("lanner.worker")


@dataclass(frozen=True, slots=True)
class SettledFailure:
    """How a failed run was settled: its message, and whether it failed for good (Kale's
    `permanent_failure`: `handle_failure` said it will not be retried)."""

    message: KaleMessage
    permanent: bool


def job_message(
    job: Job, app: App, task_class: type[Task] | None = None, task: Task | None = None
) -> KaleMessage:
    """The `KaleMessage` of a job this worker holds (its payload decoded again: failures
    are rare enough not to keep every payload around for them)."""
    args: tuple[object, ...] = ()
    kwargs: dict[str, object] = {}
    app_data = task.app_data if task is not None else None
    try:
        payload = decode(job.data, JobIdentity(job.jid, job.klass, job.queue), app.pickle_codec)
    except DecodeError:
        pass  # a job that cannot be decoded never reaches a task; nothing to show then
    else:
        args, kwargs, app_data = payload.args, dict(payload.kwargs), payload.app_data
    spent = max(0, job.retries - job.remaining)
    return KaleMessage(
        task_name=task_class.name if task_class is not None else job.klass,
        task_id=job.jid,
        task_args=list(args),
        task_kwargs=kwargs,
        task_app_data=app_data,
        # Lanner counts one number of tries: the retries the job has spent (a lost lock
        # spends one too). Kale's retry and failure counts are both that number.
        task_retry_num=spent,
        task_failure_num=spent,
        task_max_retries=job.retries,
        queue=job.queue,
        task_inst=task,
        job=job,
        app=app,
    )


class JobSettlement:
    """This worker's hold on a failed job: puts it back through the engine."""

    def __init__(self, engine: Engine, worker: str, job: Job, group: str, details: str) -> None:
        self.engine = engine
        self.worker = worker
        self.job = job
        self.group = group  # where the engine fails it if a retry finds none left
        self.details = details

    def retry(self, delay_sec: float, *, spend_retry: bool) -> None:
        job, why = self.job, self.details.strip().splitlines()[-1] if self.details else ""
        try:
            if not spend_retry:
                self.engine.release([job.jid], self.worker, job.queue, delay=delay_sec)
                logger.warning("job %s failed (%s), again in %g s, no retry spent",
                               job.jid, why, delay_sec)  # fmt: skip
                return
            left = self.engine.retry(
                job.jid, job.queue, self.worker, delay_sec, self.group, self.details
            )
        except LannerError as lost:
            logger.warning("could not retry %s: %s", job.jid, lost)
            return
        if left < 0:
            logger.warning("job %s failed (%s), no retry left: failed into %s",
                           job.jid, why, self.group)  # fmt: skip
        else:
            logger.warning("job %s failed (%s), retry in %g s", job.jid, why, delay_sec)


def retry_delay(app: App, job: Job) -> float | None:
    """Seconds before the job is retried should it fail now (None: it would fail for good),
    by its task's `_get_delay_sec_for_retry`: what the supervisor uses for a job whose
    process dies, which no `handle_failure` can settle."""
    if job.remaining <= 0:
        return None
    spent = job.retries - job.remaining
    task_class = find_task(job.klass, import_module=False)
    if task_class is None or not _own_backoff(task_class):
        return float(app.settings.retry_delay(spent))  # every job asks: kept cheap
    message = KaleMessage(task_name=job.klass, task_id=job.jid, queue=job.queue, job=job, app=app)
    with settling(message):
        return float(task_class._get_delay_sec_for_retry(spent))


_backoffs: dict[type[Task], bool] = {}


def _own_backoff(task_class: type[Task]) -> bool:
    """Whether the task changes Kale's backoff (an override may be a staticmethod too):
    known once per task class, as every job's start asks."""
    own = _backoffs.get(task_class)
    if own is None:
        own = _backoffs[task_class] = _changes_backoff(task_class)
    return own


def _changes_backoff(task_class: type[Task]) -> bool:
    method = task_class._get_delay_sec_for_retry
    default = Task._get_delay_sec_for_retry
    return (
        getattr(method, "__func__", method) is not getattr(default, "__func__", default)
        or task_class._retry_delay_multiple is not None
    )


def settle_failure(
    app: App,
    engine: Engine,
    worker: str,
    task_class: type[Task],
    task: Task | None,
    job: Job,
    error: BaseException,
    message: KaleMessage | None = None,
) -> SettledFailure:
    """Retry the job, or fail it, as its task's `handle_failure` says (module docstring).

    `message`: the job's message made earlier (a `Worker` shows its hooks one message per
    job); by default one is made now."""
    if message is None:
        message = job_message(job, app, task_class, task)
    elif task is not None:
        message.task_inst = task
    details = "".join(traceback.format_exception(error))
    if isinstance(error, ResultError):
        logger.error("job %s failed into %s: %s", job.jid, error.group, error)
        fail(engine, worker, job, error.group, str(error))
        return SettledFailure(message, permanent=True)
    group = exception_group(error)
    instruments.note_failure(engine, job.jid)
    message.bind(JobSettlement(engine, worker, job, group, details))
    with settling(message):
        try:
            will_retry = bool(task_class.handle_failure(message, error))
        except Exception as hook_error:  # the task's own code: its error must not stop the worker
            logger.exception("job %s: %s.handle_failure raised", job.jid, task_class.name)
            details += "\nwhile handle_failure ran:\n" + "".join(
                traceback.format_exception(hook_error)
            )
            will_retry = False
    if message.outcome is None:
        if will_retry:
            logger.info("job %s: handle_failure retries it its own way; this run is completed",
                        job.jid)  # fmt: skip
            _complete(engine, worker, job)
        else:
            fail(engine, worker, job, group, details)
    return SettledFailure(message, permanent=not will_retry)


def fail(engine: Engine, worker: str, job: Job, group: str, message: str) -> None:
    """Fail a held job into `group`; a lock lost meanwhile is logged, not raised. A parent
    of a chord that runs with its failures completes with the failure as its result
    instead (`lanner.workflows.inputs`), so that its callback runs."""
    try:
        if settles_by_completing(job.data):
            result = failure_result(job.jid, group, message)
            engine.complete(job.jid, worker, job.queue, result=result)
            logger.warning("job %s failed into %s: completed with its failure, for its chord",
                           job.jid, group)  # fmt: skip
            return
        engine.fail(job.jid, worker, group, message)
    except LannerError as lost:
        logger.warning("could not fail %s into %s: %s", job.jid, group, lost)


def _complete(engine: Engine, worker: str, job: Job) -> None:
    try:
        engine.complete(job.jid, worker, job.queue)
    except LannerError as lost:
        logger.warning("could not complete %s: %s", job.jid, lost)

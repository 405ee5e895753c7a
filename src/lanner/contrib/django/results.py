"""A lanner job as Django's `TaskResult`: its status, times, arguments, errors and workers.

- `id`: the jid.
- `status`: waiting, scheduled, depends, stalled: `READY`; running: `RUNNING`; complete:
  `SUCCESSFUL`; failed: `FAILED`.
- `enqueued_at`: the first `put` of its history; `started_at`, `last_attempted_at`: its
  first and its last `popped`; `finished_at`: its `done`, or its failure's time.
- `worker_ids` (so `attempts`): the worker of each `popped`.
- `errors`: one per failed run (`retried` entries, then the failure), with the exception's
  class path, and the traceback where the job kept it (its last failure's).
- `return_value`: the job's result.
- `task`: the Django task the job names, with the priority, queue and `run_after` it was
  enqueued with (kept in the job's `app_data`).

Times are aware (UTC) datetimes under `USE_TZ`, naive local ones otherwise, as Django's
`timezone.now()` gives.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from lanner.codec import JobIdentity, decode
from lanner.contrib.django import compat
from lanner.job import HistoryEvent, Job, JobState
from lanner.records import NewJob

_STATUS = {
    JobState.WAITING: "READY",
    JobState.SCHEDULED: "READY",
    JobState.DEPENDS: "READY",
    JobState.STALLED: "READY",
    JobState.RUNNING: "RUNNING",
    JobState.COMPLETE: "SUCCESSFUL",
    JobState.FAILED: "FAILED",
}


def task_result(job: Job, alias: str, django_task: Any) -> Any:
    """Django's `TaskResult` of `job`, a job of `django_task` on the backend `alias`."""
    payload = decode(job.data, JobIdentity(job.jid, job.klass, job.queue))
    enqueued = payload.app_data if isinstance(payload.app_data, dict) else {}
    history = job.history
    popped = [event for event in history if event.what == "popped"]
    run_after = enqueued.get("run_after")
    task = django_task.using(
        priority=enqueued.get("priority", job.priority),
        queue_name=enqueued.get("queue_name") or job.queue,  # a complete job is in none
        run_after=_datetime(run_after) if run_after is not None else None,
    )
    result = compat.TaskResult(
        task=task,
        id=job.jid,
        status=compat.TaskResultStatus[_STATUS[job.state]],
        enqueued_at=_first_time(history, "put"),
        started_at=_datetime(popped[0].when) if popped else None,
        last_attempted_at=_datetime(popped[-1].when) if popped else None,
        finished_at=_finished_at(job, history),
        args=list(payload.args),
        kwargs=dict(payload.kwargs),
        backend=alias,
        errors=_errors(job, history),
        worker_ids=[str(event.details.get("worker", "")) for event in popped],
    )
    if job.state == JobState.COMPLETE and job.result is not None:
        object.__setattr__(result, "_return_value", json.loads(job.result))
    return result


def relayed_result(job: NewJob, written_at: float, alias: str, django_task: Any) -> Any:
    """Django's `TaskResult` of a job still in the outbox: `READY`, enqueued when written."""
    payload = decode(job.data, JobIdentity(job.jid, job.klass, job.queue))
    enqueued = payload.app_data if isinstance(payload.app_data, dict) else {}
    run_after = enqueued.get("run_after")
    return compat.TaskResult(
        task=django_task.using(
            priority=enqueued.get("priority", job.priority or 0),
            queue_name=enqueued.get("queue_name") or job.queue,
            run_after=_datetime(run_after) if run_after is not None else None,
        ),
        id=job.jid,
        status=compat.TaskResultStatus.READY,
        enqueued_at=_datetime(written_at),
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        args=list(payload.args),
        kwargs=dict(payload.kwargs),
        backend=alias,
        errors=[],
        worker_ids=[],
    )


def class_path(group: str) -> str:
    """The dotted path of the exception class a failure group names (a builtin's group is
    its bare name, lanner's own errors' too: `errors.exception_group`)."""
    if "." in group:
        return group
    import builtins

    if isinstance(getattr(builtins, group, None), type):
        return f"builtins.{group}"
    return f"lanner.errors.{group}"


def _errors(job: Job, history: tuple[HistoryEvent, ...]) -> list[Any]:
    groups = [
        str(event.details["group"])
        for event in history
        if event.what == "retried" and "group" in event.details
    ]
    errors = [compat.TaskError(exception_class_path=class_path(g), traceback="") for g in groups]
    if job.failure is not None:
        last = compat.TaskError(
            exception_class_path=class_path(job.failure.group), traceback=job.failure.message
        )
        if job.state == JobState.FAILED or (groups and groups[-1] == job.failure.group):
            # A retried job keeps its last failure: the traceback of the last retried run.
            errors = [*errors[:-1], last] if job.state != JobState.FAILED else [*errors, last]
    return errors


def _finished_at(job: Job, history: tuple[HistoryEvent, ...]) -> datetime | None:
    if job.state == JobState.COMPLETE:
        done = [event.when for event in history if event.what == "done"]
        return _datetime(done[-1]) if done else None
    if job.state == JobState.FAILED and job.failure is not None:
        return _datetime(job.failure.when)
    return None


def _first_time(history: tuple[HistoryEvent, ...], what: str) -> datetime | None:
    for event in history:
        if event.what == what:
            return _datetime(event.when)
    return None


def _datetime(when: float) -> datetime:
    """A Unix time as Django's `timezone.now()` would give it (aware under USE_TZ)."""
    from django.conf import settings

    if settings.USE_TZ:
        return datetime.fromtimestamp(when, tz=UTC)
    return datetime.fromtimestamp(when)

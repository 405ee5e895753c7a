"""Checking a popped job before its task runs: its size, its task, its payload, its arguments.

A workflow's step also gets its parents' results here, before its own arguments
(`lanner.workflows.inputs`).

A job that fails a check can never run, however often it is tried: it is `Rejected`, and
the loop fails it at once into the `lanner-*` failure group saying why, without spending
retries and without stopping the rest of its batch.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from lanner.codec import JobIdentity, Payload, decode
from lanner.errors import DecodeError
from lanner.job import Job
from lanner.task import Task, find_task

if TYPE_CHECKING:
    from lanner.app import App


class Rejected(Exception):
    """A job that can never run: it fails into `group` without reaching a task."""

    def __init__(self, group: str, message: str) -> None:
        super().__init__(message)
        self.group = group
        self.message = message


def admit(
    job: Job, max_data_bytes: int, app: App
) -> tuple[type[Task], Payload, tuple[Any, ...], dict[str, Any]]:
    """Find, decode and check the job's task, or raise `Rejected` saying why it can't run."""
    # No character takes more than 4 bytes: most payloads need no encoding to be measured.
    if len(job.data) * 4 > max_data_bytes:
        size = len(job.data.encode("utf-8", "surrogatepass"))
        if size > max_data_bytes:
            raise Rejected(
                "lanner-oversized", f"data is {size} bytes; the limit is {max_data_bytes}"
            )
    task_class = find_task(job.klass)
    if task_class is None:
        raise Rejected("lanner-unknown-task", f"no task is named {job.klass!r}")
    identity = JobIdentity(job.jid, job.klass, job.queue)
    try:
        payload = decode(job.data, identity, app.pickle_codec)
    except DecodeError as error:
        raise Rejected(error.group, str(error)) from None
    args, kwargs = payload.args, dict(payload.kwargs)
    if payload.workflow is not None:  # a workflow's step: its parents' results come first
        from lanner.workflows.inputs import leading_arguments

        args = (*leading_arguments(job, payload.workflow, app), *args)
    if args or kwargs or not _takes_no_arguments(task_class):
        _check_arguments(job, task_class, args, kwargs)
    return task_class, payload, args, kwargs


def _check_arguments(
    job: Job, task_class: type[Task], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    try:
        _signature(task_class).bind(None, *args, **kwargs)
    except TypeError as error:
        raise Rejected(
            "lanner-bad-arguments", f"{job.klass}{_call(args, kwargs)}: {error}"
        ) from None


_signatures: dict[str, inspect.Signature] = {}
_no_arguments: dict[str, bool] = {}


def _signature(task_class: type[Task]) -> inspect.Signature:
    """run_task's signature, computed once per task (it was 20% of a no-op job's cost)."""
    signature = _signatures.get(task_class.name)
    if signature is None:
        signature = _signatures[task_class.name] = inspect.signature(task_class.run_task)
    return signature


def _takes_no_arguments(task_class: type[Task]) -> bool:
    """Whether run_task can be called without arguments: known once per task, so that a job
    without any (a no-op's, a trigger's) skips `bind`, a third of admission's cost."""
    takes = _no_arguments.get(task_class.name)
    if takes is None:
        try:
            _signature(task_class).bind(None)
            takes = True
        except TypeError:
            takes = False
        _no_arguments[task_class.name] = takes
    return takes


def _call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = ", ".join(shown)
    return f"({text[:200]}{'...' if len(text) > 200 else ''})"

"""Kale's publisher (`kale.publisher.Publisher`): where a Kale-style task's runs are published.

`Task.publish` and Kale's default `Task.republish` both go through
`Publisher.publish(task_class, task_id, payload, ...)`, as in Kale, so code (and tests that
patch `lanner.publisher.Publisher.publish`) written for Kale's keep working. The payload
is Kale's: `{"args": ..., "kwargs": ..., "app_data": ...}`; the job is published through
the task class's app, under `task_id`.

A republish (`current_retry_num` given) of the task id whose job this process's worker is
settling cannot be a second job, since that jid is running: it retries that job in place
(`lanner.message.KaleMessage.retry_in_place`). Kale's retry counters are then the engine's
to keep; `current_retry_num` itself is not stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lanner.errors import MalformedArgument
from lanner.message import settling_message

if TYPE_CHECKING:
    from lanner.handle import JobHandle
    from lanner.task import Task

__all__ = ["Publisher"]


class Publisher:
    """Publishes Kale-style task runs (stateless: one per process is plenty)."""

    def publish(
        self,
        task_class: type[Task],
        task_id: str,
        payload: Mapping[str, Any],
        current_retry_num: int | None = None,
        current_failure_num: int | None = None,
        delay_sec: float | None = None,
    ) -> JobHandle:
        """Publish one run of `task_class` as job `task_id`; return its handle.

        `delay_sec` delays it. With `current_retry_num`, this is a republish: of the job
        being settled here, it retries that job in place; `current_failure_num` above the
        job's failures so far spends one of its retries.
        """
        from lanner.handle import JobHandle

        args = tuple(payload.get("args") or ())
        kwargs = dict(payload.get("kwargs") or {})
        app_data = payload.get("app_data")
        delay = float(delay_sec or 0)
        message = settling_message()
        held = message is not None and message.bound and message.task_id == task_id
        if current_retry_num is not None and message is not None and held:
            same = (list(args), kwargs, app_data) == (
                list(message.task_args), dict(message.task_kwargs), message.task_app_data
            )  # fmt: skip
            if not same:
                raise MalformedArgument(
                    f"republish of {task_id} with other arguments: a job retried in place "
                    "keeps its own (publish a new task with its own id instead)"
                )
            message.retry_in_place(delay, current_failure_num or 0)
            return JobHandle(task_id, message.app or task_class._publishing_app())
        return task_class._publishing_app().publish(
            task_class, args, kwargs, app_data=app_data, delay=delay, jid=task_id
        )

"""Kale's test fixtures (`kale.test_utils`), for the tests of projects that write Kale-style tasks.

    from lanner import test_utils                 # was: from kale import test_utils

    task = test_utils.new_mock_task(test_utils.FailTask)
    message = test_utils.MockMessage(task, failure_num=2)
    will_retry = test_utils.FailTask.handle_failure(message, ValueError("boom"))

The tasks are Kale's: `MockTask` (does nothing), `FailTask` (raises `TaskException`),
`ShouldNotRunTask` (`should_run_task` says no), `TimeoutTask` (raises `TimeoutException`),
`SlowButNotTooSlowTask` (passes its `target_runtime`), `FailTaskNoRetries`. Each has a
fixed task id. `MockMessage` is a `lanner.message.KaleMessage` bound to no worker:
republishing it publishes a new job (patch `lanner.publisher.Publisher.publish` to see the
call instead). Kale's `MockConsumer`, `TestQueueClass` and `TestQueueSelector` stand in for
its SQS consumer and queue classes, which lanner does not have: they are left out.

Importing this module registers its tasks (as `lanner.test_utils.MockTask`, ...), which is
harmless: a worker only runs what a job names.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lanner import exceptions
from lanner.message import KaleMessage
from lanner.task import Task

__all__ = [
    "FailTask",
    "FailTaskNoRetries",
    "MockMessage",
    "MockTask",
    "ShouldNotRunTask",
    "SlowButNotTooSlowTask",
    "TimeoutTask",
    "new_mock_message",
    "new_mock_task",
]


class MockTask(Task):
    """A task that does nothing; its id is `mock_task`."""

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        return "mock_task"

    def run_task(self, *args: Any, **kwargs: Any) -> None:
        pass


class FailTask(Task):
    """A task that always raises `TaskException`; its id is `fail_task`."""

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        return "fail_task"

    def run_task(self, *args: Any, **kwargs: Any) -> None:
        raise exceptions.TaskException("Task failed.")


class ShouldNotRunTask(Task):
    """A task whose `should_run_task` always says no; its id is `should_not_run_task`."""

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        return "should_not_run_task"

    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def run_task(self, *args: Any, **kwargs: Any) -> None:
        pass


class TimeoutTask(Task):
    """A task that raises `TimeoutException`, as one past its time limit does."""

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        return "fail_task"  # Kale's own choice for this fixture

    def run_task(self, *args: Any, **kwargs: Any) -> None:
        raise exceptions.TimeoutException("Task failed.")


class SlowButNotTooSlowTask(Task):
    """A task that looks as if it ran past its `target_runtime` (without taking the time):
    running it calls `_alert_runtime_exceeded`."""

    time_limit = 100
    target_runtime = 90

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        return "moderately_slow_task"

    def run_task(self, *args: Any, **kwargs: Any) -> None:
        # Move the start back rather than sleep: the run then measures as slow.
        self._start_time = (self._start_time or time.time()) - self.target_runtime


class FailTaskNoRetries(FailTask):
    """`FailTask` without retries: its first failure is permanent (`no_retries`)."""

    max_retries = None


class MockMessage(KaleMessage):
    """A message for `task_inst`, bound to no worker, with the counts and payload given."""

    def __init__(
        self,
        task_inst: Task,
        task_args: Sequence[Any] | None = None,
        task_kwargs: Mapping[str, Any] | None = None,
        app_data: Any = None,
        retry_num: int = 0,
        failure_num: int = 0,
    ) -> None:
        super().__init__(
            task_name=task_inst.task_name,
            task_id=task_inst.task_id,
            task_args=task_args or [],
            task_kwargs=task_kwargs or {},
            task_app_data=app_data or {},
            task_retry_num=retry_num,
            task_failure_num=failure_num,
            task_inst=task_inst,
        )
        self.id = "id"  # Kale's fixture value


def new_mock_message(task_class: type[Task] | None = None) -> MockMessage:
    """A `MockMessage` of a new task of `task_class` (default `MockTask`)."""
    return MockMessage(new_mock_task(task_class))


def new_mock_task(task_class: type[Task] | None = None) -> Task:
    """A new task of `task_class` (default `MockTask`), made from a Kale message body with
    the class's task id, as if a worker had just dequeued it."""
    task_class = task_class or MockTask
    body = {
        "id": task_class._get_task_id(),
        "_enqueued_time": time.time(),
        "_publisher": f"{platform.node()}[{os.getpid()}]",
    }
    return task_class(body)

"""Kale's message (`kale.message.KaleMessage`): a job as a task's failure policy sees it.

Kale hands its message object to `Task.handle_failure`, `Task.republish`,
`Task._report_permanent_failure` and the worker's hooks. On lanner a `KaleMessage` is built
from the `Job` being settled and carries what Kale's does: `task_id` (also `id`, the jid),
`task_name`, `task_args`, `task_kwargs`, `task_app_data`, `task_retry_num`,
`task_failure_num`, the queue's name (`sqs_queue_name`, also `queue`) and `task_inst`.
Lanner adds `task_max_retries` (the job's own retry budget, which lanner counts against
instead of the class's `max_retries`: a publish can give a job its own), `job` and `app`.

A message that a worker is settling is bound to that worker's hold on the job: while the
task's `handle_failure` runs, it is the message being settled (`settling`), and Kale's
`republish` of its task id (through `lanner.publisher.Publisher`) retries that job in
place, the only way a job can run again while its worker holds it. A message made by
hand (tests, `lanner.test_utils.MockMessage`) is bound to nothing: republishing it
publishes a new job, as Kale does.

Not to be confused with `lanner.prepared.Message`, a publish prepared for
`App.publish_many`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol

from lanner.errors import InvalidState

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.job import Job
    from lanner.task import Task

__all__ = ["KaleMessage", "Settlement", "settling", "settling_message"]

Outcome = Literal["retried", "released"]
"""How a bound message's job was put back: a retry spent (`retried`), or none (`released`)."""


class Settlement(Protocol):
    """A worker's hold on the job of the message it settles: how it is put back."""

    def retry(self, delay_sec: float, *, spend_retry: bool) -> None:
        """Run the job again in `delay_sec` seconds, spending one of its retries or not."""
        ...


class KaleMessage:
    """Kale's message: one run of a task, as its failure hooks see it (module docstring)."""

    def __init__(
        self,
        *,
        task_name: str,
        task_id: str | None,
        task_args: Sequence[Any] | None = None,
        task_kwargs: Mapping[str, Any] | None = None,
        task_app_data: Any = None,
        task_retry_num: int = 0,
        task_failure_num: int = 0,
        task_max_retries: int | None = None,
        queue: str | None = None,
        task_inst: Task | None = None,
        job: Job | None = None,
        app: App | None = None,
    ) -> None:
        self.id = task_id  # Kale: the SQS message's id; lanner's job id is the task's
        self.task_name = task_name
        self.task_id = task_id
        self.task_args: Sequence[Any] = task_args if task_args is not None else []
        self.task_kwargs: Mapping[str, Any] = task_kwargs if task_kwargs is not None else {}
        self.task_app_data = task_app_data
        self.task_retry_num = task_retry_num
        self.task_failure_num = task_failure_num
        self.task_max_retries = task_max_retries
        self.sqs_queue_name = queue
        self.sqs_receipt_handle: str | None = None  # no lanner counterpart
        self.task_inst = task_inst
        self.job = job
        self.app = app
        self.outcome: Outcome | None = None
        self._settlement: Settlement | None = None

    @property
    def queue(self) -> str | None:
        return self.sqs_queue_name

    @property
    def retries_allowed(self) -> int:
        """The job's retry budget: `task_max_retries`, else its task class's `max_retries`."""
        if self.task_max_retries is not None:
            return self.task_max_retries
        max_retries = type(self.task_inst).max_retries if self.task_inst is not None else None
        return max_retries or 0

    def bind(self, settlement: Settlement) -> None:
        """Tie the message to the worker holding its job (the worker does this)."""
        self._settlement = settlement

    @property
    def bound(self) -> bool:
        """Whether a worker holds the message's job (so republishing it retries in place)."""
        return self._settlement is not None

    def retry_in_place(self, delay_sec: float, failure_num: int) -> None:
        """Run the held job again in `delay_sec` seconds: Kale's republish of the same task.

        A `failure_num` above `task_failure_num` counts a failure: one of the job's retries
        is spent (the engine fails the job if none is left). Otherwise it is given back
        without spending one (Kale's `increment_failure_num=False`).
        """
        if self._settlement is None:
            raise InvalidState(f"message of task {self.task_id}: no worker holds its job")
        if self.outcome is not None:
            raise InvalidState(f"job {self.task_id} was put back already ({self.outcome})")
        spend = failure_num > self.task_failure_num
        self._settlement.retry(delay_sec, spend_retry=spend)
        self.outcome = "retried" if spend else "released"

    def __repr__(self) -> str:
        return f"KaleMessage({self.task_name} {self.task_id})"


_settling: contextvars.ContextVar[KaleMessage | None] = contextvars.ContextVar(
    "lanner_settling", default=None
)


@contextmanager
def settling(message: KaleMessage) -> Iterator[KaleMessage]:
    """Make `message` the one being settled for the block (the worker, around
    `handle_failure`)."""
    token = _settling.set(message)
    try:
        yield message
    finally:
        _settling.reset(token)


def settling_message() -> KaleMessage | None:
    """The message a worker is settling in this context, or None."""
    return _settling.get()

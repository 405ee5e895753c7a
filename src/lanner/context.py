"""What a running task can know of itself: the job it runs for.

    @app.task
    def report(day: str) -> None:
        job = lanner.current_job()   # the Job being run, with its jid, tries left, history

Set by the worker for the time a job's task runs (async tasks included); None elsewhere.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lanner.job import Job

_current: contextvars.ContextVar[Job | None] = contextvars.ContextVar("lanner_job", default=None)


def current_job() -> Job | None:
    """The job whose task is running in this context, or None."""
    return _current.get()


def running_job(job: Job | None) -> contextvars.Token[Job | None]:
    """Make `job` the current job (the worker, around a task); reset with the token."""
    return _current.set(job)


def reset(token: contextvars.Token[Job | None]) -> None:
    _current.reset(token)

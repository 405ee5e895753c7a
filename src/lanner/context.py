"""What a running task can know of itself: the job it runs for.

    @app.task
    def report(day: str) -> None:
        job = lanner.current_job()   # the Job being run, with its jid, tries left, history
        job.progress(0.5, "half way")

Set by the worker for the time a job's task runs (async tasks included); None elsewhere.
The worker also names the engine the job runs against, where `Job.progress` writes.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lanner.engine import Engine
    from lanner.job import Job

Running = tuple["Job", "Engine | None"]
"""The running job, and the engine it runs against (None: eager mode, no store)."""

_current: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "lanner_job", default=None
)


def current_job() -> Job | None:
    """The job whose task is running in this context, or None."""
    running = _current.get()
    return None if running is None else running[0]


def current_engine() -> Engine | None:
    """The engine the job running in this context runs against, or None."""
    running = _current.get()
    return None if running is None else running[1]


def running_job(job: Job | None, engine: Engine | None = None) -> contextvars.Token[Running | None]:
    """Make `job` the current job, run against `engine` (the worker, around a task); reset
    with the token."""
    return _current.set(None if job is None else (job, engine))


def reset(token: contextvars.Token[Running | None]) -> None:
    _current.reset(token)

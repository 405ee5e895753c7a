"""Sentry for lanner: each task error reported with its job's context.

    import sentry_sdk
    import lanner.contrib.sentry

    sentry_sdk.init(dsn=...)                    # pip install 'lanner[sentry]'
    lanner.contrib.sentry.instrument(app)       # in the module the workers load (-A)

Each run of a job by a worker of `app` has a Sentry scope of its own (an isolation scope:
what one job sets never reaches another, in a process running many at once), tagged with
the job's queue, task, jid, attempt, tags and outcome and holding a `lanner` context (those, its
tags, its worker), so that what the task itself reports carries them too. When the task
raises, the error is captured once its end is settled (`retried` or `failed`) as an
unhandled error of mechanism `lanner`; a run stopped (cancelled, its lock lost, its
worker stopping) is not an error of the task and is not reported. `retried=False` reports
only the runs that failed for good.

Nothing is patched: only the apps given to `instrument` report, through whatever client
`sentry_sdk.init` set up (none: nothing is sent). Hence no `sentry_sdk.integrations.
Integration` subclass: those patch a library's globals at `init`, and lanner's hook is
each App's own (`lanner.instruments`). Lanner's own log line of a permanent
failure (`lanner.task`) is left out of Sentry's logging integration, so that a failed
job is one event, not two.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import sentry_sdk
from sentry_sdk.integrations.logging import ignore_logger
from sentry_sdk.utils import event_from_exception

from lanner.instruments import Instrument, Run

if TYPE_CHECKING:
    from lanner.app import App

__all__ = ["ErrorReports", "instrument"]

MECHANISM = "lanner"
TAG_MAX_CHARS = 200  # Sentry's longest tag value


def instrument(app: App, *, retried: bool = True) -> ErrorReports:
    """Report the task errors of `app`'s workers to Sentry; `retried=False`: only those of
    runs that failed for good."""
    reports = ErrorReports(retried=retried)
    app.instrument(reports)
    ignore_logger("lanner.task")
    return reports


class ErrorReports(Instrument):
    """A Sentry scope for each run, and its task's error captured (module docstring)."""

    def __init__(self, *, retried: bool = True) -> None:
        self.reported = ("retried", "failed") if retried else ("failed",)

    @contextlib.contextmanager
    def running(self, run: Run) -> Iterator[None]:
        job = run.job
        attempt = job.retries - job.remaining + 1
        with sentry_sdk.isolation_scope() as scope:
            scope.set_tag("lanner.queue", job.queue)
            scope.set_tag("lanner.task", run.task.name)
            scope.set_tag("lanner.jid", job.jid)
            scope.set_tag("lanner.attempt", str(attempt))
            if job.tags:
                scope.set_tag("lanner.tags", ",".join(job.tags)[:TAG_MAX_CHARS])
            scope.set_context(
                "lanner",
                {
                    "queue": job.queue,
                    "task": run.task.name,
                    "jid": job.jid,
                    "attempt": attempt,
                    "retries": job.retries,
                    "tags": list(job.tags),
                    "worker": job.worker,
                },
            )
            yield
            error = run.error
            if error is None or run.outcome not in self.reported:
                return
            scope.set_tag("lanner.outcome", run.outcome)
            client = sentry_sdk.get_client()
            mechanism: dict[str, Any] = {"type": MECHANISM, "handled": False}
            event, hint = event_from_exception(error, client.options, mechanism)
            scope.capture_event(event, hint=hint)

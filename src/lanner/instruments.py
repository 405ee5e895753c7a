"""What integrations (tracing, error reporting) hook into: each publish and each run of a job.

An `Instrument` is given to one App (`app.instrument(instrument)`; `lanner.contrib.otel`
and `lanner.contrib.sentry` do it for their users), and sees three moments:

    publishing(app, messages)   a context around one publish (of one or many jobs)
    headers()                   what each job published now carries beside its arguments
                                (a trace's context), in its envelope's "headers" object
    running(run)                a context around one run of a job by a worker: entered
                                before the task starts, left once its end is settled
                                (`run.outcome`, `run.error` set), in the task's context,
                                so what the task does happens inside it

A run that fails leaves what its instruments noted (`run.notes`: its trace's context) in
its job's history, as a `noted` entry (where the engine keeps custom entries, `log`), so
that the next try can find it (`Run.noted_before`): a retry links to the try before it.

An App without instruments pays one attribute test per publish and per run, nothing else.
Headers are metadata, not arguments: a worker that does not know them ignores them, they
are outside a signed payload's signature, and ones that are not an object of strings are
dropped, never a reason to fail a job.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.engine import Engine
    from lanner.job import Job
    from lanner.prepared import Message
    from lanner.task import Task
    from lanner.worker.reporter import Outcome


@dataclass(slots=True)
class Run:
    """One run of a job by a worker, as its instruments see it."""

    job: Job
    task: type[Task]
    headers: Mapping[str, str] = field(default_factory=dict)
    outcome: Outcome = ""
    """How it ended, once its context is left: `completed`, `retried`, `failed`, `stopped`;
    "" if the worker itself failed meanwhile (the store went away) or the task was deferred."""
    error: BaseException | None = None
    """What the task raised, if it did."""
    notes: dict[str, str] = field(default_factory=dict)
    """What the job's history keeps of this run should it fail (module docstring)."""

    def noted_before(self) -> Mapping[str, Any]:
        """What the instruments noted of the job's latest failed try ({}: none, or this is
        its first)."""
        if self.job.remaining >= self.job.retries and self.job.failure is None:
            return {}  # a first try: its history need not be read
        for event in reversed(self.job.history):
            if event.what == NOTED:
                return event.details
        return {}


NOTED: Final = "noted"
"""The history entry of a failed run's notes."""

logger = logging.getLogger("lanner.instruments")
_running: contextvars.ContextVar[Run | None] = contextvars.ContextVar("lanner_run", default=None)


class Instrument:
    """Does nothing: an integration overrides the moments it needs."""

    def publishing(
        self, app: App, messages: Sequence[Message]
    ) -> contextlib.AbstractContextManager[Any]:
        """A context around one publish of `messages` (entered before their jobs are made)."""
        return contextlib.nullcontext()

    def headers(self) -> Mapping[str, str]:
        """What a job published now carries for this instrument (read inside `publishing`)."""
        return {}

    def running(self, run: Run) -> contextlib.AbstractContextManager[Any]:
        """A context around one run of a job (module docstring)."""
        return contextlib.nullcontext()


@contextlib.contextmanager
def publishing(app: App, messages: Sequence[Message]) -> Iterator[None]:
    """Every instrument's `publishing` context, the first one outermost."""
    with contextlib.ExitStack() as stack:
        for instrument in app.instruments:
            stack.enter_context(instrument.publishing(app, messages))
        yield


def headers(app: App) -> dict[str, str] | None:
    """What the app's instruments put in a job published now (None: nothing)."""
    carried: dict[str, str] = {}
    for instrument in app.instruments:
        carried.update(instrument.headers())
    return carried or None


@contextlib.contextmanager
def running(app: App, run: Run) -> Iterator[Run]:
    """Every instrument's `running` context around one run, the first one outermost."""
    token = _running.set(run)
    try:
        if len(app.instruments) == 1:  # the usual case, without an ExitStack's cost
            with app.instruments[0].running(run):
                yield run
        else:
            with contextlib.ExitStack() as stack:
                for instrument in app.instruments:
                    stack.enter_context(instrument.running(run))
                yield run
    finally:
        _running.reset(token)


def note_failure(engine: Engine, jid: str) -> None:
    """Keep the notes of the run of `jid` failing here in its history (the worker, while it
    still holds the job). Nothing without instruments, notes, or an engine that keeps
    custom entries; a store that refuses is logged, never the run's error."""
    run = _running.get()
    if run is None or not run.notes or run.job.jid != jid:
        return
    from lanner.engine import Capability
    from lanner.errors import LannerError

    if Capability.LOG not in engine.capabilities:
        return
    try:
        engine.log(jid, NOTED, run.notes)
    except LannerError as error:
        logger.warning("job %s: its run's notes not kept (%s)", jid, error)


def carried(value: Any) -> dict[str, str]:
    """An envelope's headers as they are read: an object of strings, else nothing."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}

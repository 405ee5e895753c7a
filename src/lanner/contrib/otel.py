"""OpenTelemetry for lanner: a span for each publish, its trace carried in the job, and a
span for each run of the job, continuing that trace wherever the worker runs.

    import lanner.contrib.otel

    lanner.contrib.otel.instrument(app)     # pip install 'lanner[otel]'

What it makes, after OpenTelemetry's conventions for messaging where they fit:

    send QUEUE      PRODUCER, around one publish (`send` if its jobs go to several queues);
                    its context goes in each job's envelope ("headers": W3C `traceparent`,
                    `tracestate`, by the globally configured propagator)
    process QUEUE   CONSUMER, around one run of a job by a worker, child of the publish's
                    span; attributes: messaging.system "lanner", messaging.destination.name
                    (the queue), messaging.message.id (the jid), messaging.operation.type
                    "process", lanner.task, lanner.attempt (1 for the first try),
                    lanner.outcome (completed, retried, failed, stopped), error.type if the
                    task raised; a retry links to the span of the try before it

It uses only the OpenTelemetry API: spans go wherever the application's tracer provider
sends them (none set: nowhere, at the API's no-op cost). An App not instrumented pays
nothing for it (`lanner.instruments`), and a worker without this module ignores the headers.
The link of a retry needs the engine to keep custom history entries (SQLite, Redis).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from lanner._version import __version__
from lanner.instruments import Instrument, Run

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.prepared import Message

__all__ = ["Tracing", "instrument"]

SYSTEM = "lanner"
_PREVIOUS = TraceContextTextMapPropagator()  # how a failed try's span is noted for the next


def instrument(app: App, tracer_provider: trace.TracerProvider | None = None) -> Tracing:
    """Trace `app`'s publishes and its workers' runs, through `tracer_provider` (default:
    the global one, as set by `opentelemetry.trace.set_tracer_provider`)."""
    tracing = Tracing(tracer_provider)
    app.instrument(tracing)
    return tracing


class Tracing(Instrument):
    """The spans of an App's publishes and runs (module docstring)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("lanner", __version__, tracer_provider=tracer_provider)

    @contextlib.contextmanager
    def publishing(self, app: App, messages: Sequence[Message]) -> Iterator[None]:
        queues = {_queue_of(message) for message in messages}
        tasks = {message.task.name for message in messages}
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
        }
        if len(queues) == 1:
            attributes["messaging.destination.name"] = next(iter(queues))
        if len(tasks) == 1:
            attributes["lanner.task"] = next(iter(tasks))
        if len(messages) == 1 and messages[0].options.jid is not None:
            attributes["messaging.message.id"] = messages[0].options.jid
        elif len(messages) != 1:
            attributes["messaging.batch.message_count"] = len(messages)
        name = f"send {next(iter(queues))}" if len(queues) == 1 else "send"
        with self.tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes):
            yield

    def headers(self) -> Mapping[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier

    @contextlib.contextmanager
    def running(self, run: Run) -> Iterator[None]:
        # Spans by hand, not `start_as_current_span`: its layers of context managers cost
        # a no-op job a tenth of its CPU (docs/benchmarks.md, "Tracing and error reports").
        job = run.job
        parent = propagate.extract(run.headers) if run.headers else None
        span = self.tracer.start_span(
            f"process {job.queue}",
            parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": job.jid,
                "lanner.task": run.task.name,
                "lanner.attempt": job.retries - job.remaining + 1,
            },
            links=_previous_try(run),
            record_exception=False,  # the worker settles the task's error: recorded below
            set_status_on_exception=False,
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            if span.is_recording():
                # Kept in the job's history should this try fail: the next links to it.
                _PREVIOUS.inject(run.notes)
            yield
        finally:
            otel_context.detach(token)
            if span.is_recording():
                _ended(span, run)
            span.end()


def _ended(span: trace.Span, run: Run) -> None:
    span.set_attribute("lanner.outcome", run.outcome or "unsettled")
    error = run.error
    if error is not None:
        span.record_exception(error)
        span.set_attribute("error.type", _qualified(type(error)))
        span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")


def _previous_try(run: Run) -> list[Link]:
    """A link to the span of the job's latest failed try, if its history noted one."""
    noted = run.noted_before()
    if not noted:
        return []
    carrier = {k: v for k, v in noted.items() if isinstance(k, str) and isinstance(v, str)}
    previous = trace.get_current_span(_PREVIOUS.extract(carrier)).get_span_context()
    if not previous.is_valid:
        return []
    return [Link(previous, {"lanner.link": "previous-try"})]


def _queue_of(message: Message) -> str:
    from lanner.app import DEFAULT_QUEUE

    return message.options.queue or message.task.queue or DEFAULT_QUEUE


def _qualified(kind: type[BaseException]) -> str:
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )

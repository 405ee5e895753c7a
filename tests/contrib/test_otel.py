"""`lanner.contrib.otel`: spans from real publishes and real runs (a SQLite file, the worker
loop through `drain`, and the loop that runs many jobs at once), caught by the SDK's
in-memory exporter."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import lanner
from lanner.contrib import otel
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.worker.concurrent import ConcurrentLoop

Spans = tuple[TracerProvider, InMemorySpanExporter]


@pytest.fixture
def spans() -> Spans:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def app(tmp_path: Path) -> Iterator[lanner.App]:
    yield from app_on(f"sqlite:///{tmp_path / 'jobs.db'}")


def app_on(url: str) -> Iterator[lanner.App]:
    app = lanner.App(url, settings=lanner.Settings(broker=url, retry_delay_multiple_sec=0))
    yield app
    app.close()


@pytest.fixture
def redis_app(redis_url: str) -> Iterator[lanner.App]:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    yield from app_on(redis_url)


def stored(app: lanner.App, jid: str) -> lanner.Job:
    job = app.engine.get(jid)
    assert job is not None
    return job


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_a_run_continues_the_trace_of_its_publish(app: lanner.App, spans: Spans) -> None:
    provider, exporter = spans
    otel.instrument(app, provider)

    @app.task(queue="emails")
    def send(to: str) -> str:
        return to

    with provider.get_tracer("test").start_as_current_span("request") as request:
        jid = send.delay("a@example.com")
    assert lanner.drain(app) == 1

    [publish] = named(exporter, "send emails")
    [process] = named(exporter, "process emails")
    assert publish.kind is SpanKind.PRODUCER
    assert process.kind is SpanKind.CONSUMER
    assert publish.parent is not None
    assert publish.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None
    assert process.parent.span_id == publish.context.span_id
    assert process.context.trace_id == request.get_span_context().trace_id
    assert publish.attributes is not None
    assert process.attributes is not None
    assert publish.attributes["messaging.system"] == "lanner"
    assert publish.attributes["messaging.destination.name"] == "emails"
    assert dict(process.attributes) == {
        "messaging.system": "lanner",
        "messaging.operation.type": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": jid,
        "lanner.task": send.name,
        "lanner.attempt": 1,
        "lanner.outcome": "completed",
    }
    assert process.status.status_code is StatusCode.UNSET


def test_an_async_publish_is_a_child_of_the_span_it_is_awaited_in(
    app: lanner.App, spans: Spans
) -> None:
    """`adelay` publishes in a thread: the awaiting handler's span goes along."""
    provider, exporter = spans
    otel.instrument(app, provider)

    @app.task(queue="emails")
    def send(to: str) -> None: ...

    async def handler() -> str:
        with provider.get_tracer("test").start_as_current_span("POST /signup"):
            return await send.adelay("a@example.com")

    asyncio.run(handler())
    assert lanner.drain(app) == 1
    [request] = named(exporter, "POST /signup")
    [publish] = named(exporter, "send emails")
    [process] = named(exporter, "process emails")
    assert publish.parent is not None
    assert publish.parent.span_id == request.context.span_id
    assert process.context.trace_id == request.context.trace_id


def test_a_retry_links_to_the_try_before_it_on_redis(redis_app: lanner.App, spans: Spans) -> None:
    test_a_retry_links_to_the_try_before_it(redis_app, spans)


def test_a_retry_links_to_the_try_before_it(app: lanner.App, spans: Spans) -> None:
    provider, exporter = spans
    otel.instrument(app, provider)

    @app.task(queue="flaky", max_retries=2)
    def flaky() -> None:
        raise ValueError("down")

    jid = flaky.delay()
    assert lanner.drain(app, raise_errors=False) == 3

    tries = named(exporter, "process flaky")
    assert [span.attributes and span.attributes["lanner.attempt"] for span in tries] == [1, 2, 3]
    assert [span.attributes and span.attributes["lanner.outcome"] for span in tries] == [
        "retried", "retried", "failed",
    ]  # fmt: skip
    assert len({span.context.trace_id for span in tries}) == 1  # the publish's trace
    assert tries[0].links == ()
    for before, after in itertools.pairwise(tries):
        [link] = after.links
        assert link.context.span_id == before.context.span_id
    for span in tries:
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["error.type"] == "ValueError"
        assert [event.name for event in span.events] == ["exception"]
    noted = [event for event in stored(app, jid).history if event.what == "noted"]
    assert len(noted) == 3
    assert all("traceparent" in event.details for event in noted)


def test_the_trace_reaches_what_the_task_does(app: lanner.App, spans: Spans) -> None:
    """An async task on the loop that runs many jobs at once, and a sync one in its
    thread: a span each task opens is a child of its run's span."""
    provider, exporter = spans
    otel.instrument(app, provider)
    tracer = provider.get_tracer("task")

    @app.task(queue="mixed")
    async def fetch() -> None:
        with tracer.start_as_current_span("fetch inside"):
            await asyncio.sleep(0)

    @app.task(queue="mixed")
    def compute() -> None:
        with tracer.start_as_current_span("compute inside"):
            pass

    fetch.delay()
    compute.delay()
    run_many_at_once(app, "mixed", lambda: len(named(exporter, "process mixed")) == 2)

    runs = {span.context.span_id: span for span in named(exporter, "process mixed")}
    assert len(runs) == 2
    for inside in ("fetch inside", "compute inside"):
        [span] = named(exporter, inside)
        assert span.parent is not None
        assert span.parent.span_id in runs


def test_a_retry_links_to_the_try_before_it_many_at_once(app: lanner.App, spans: Spans) -> None:
    provider, exporter = spans
    otel.instrument(app, provider)

    @app.task(queue="flaky", max_retries=1)
    async def flaky() -> None:
        raise ValueError("down")

    flaky.delay()
    run_many_at_once(app, "flaky", lambda: len(named(exporter, "process flaky")) == 2)
    first, second = named(exporter, "process flaky")
    [link] = second.links
    assert link.context.span_id == first.context.span_id


def run_many_at_once(app: lanner.App, queue: str, done: Callable[[], bool]) -> None:
    """The loop that runs many jobs at once, in a thread, until `done()`."""
    queues = [QueueConfig(queue, long_poll_time_sec=0.2)]
    loop = ConcurrentLoop(app, queues, resolve_selector("reduced-lottery"), tasks_per_process=4)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    loop.stop()
    thread.join(30)
    loop.close()


def test_an_app_not_instrumented_carries_nothing(app: lanner.App, spans: Spans) -> None:
    provider, exporter = spans

    @app.task
    def plain() -> None:
        pass

    with provider.get_tracer("test").start_as_current_span("request"):
        jid = plain.delay()
    assert "headers" not in stored(app, jid).data
    assert lanner.drain(app) == 1
    assert [span.name for span in exporter.get_finished_spans()] == ["request"]


def test_an_old_worker_runs_a_traced_job(app: lanner.App, spans: Spans, tmp_path: Path) -> None:
    """The headers are beside the arguments: a worker of an app that is not instrumented
    (one from before them) runs the job as it always did."""
    provider, _ = spans
    otel.instrument(app, provider)

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    with provider.get_tracer("test").start_as_current_span("request"):
        jid = add.delay(1, 2)
    assert '"traceparent"' in stored(app, jid).data
    plain = lanner.App(app.settings.broker, results=True)
    try:
        assert lanner.drain(plain, queues=["default"]) == 1
        assert plain.handle(jid).result(timeout=10) == 3
    finally:
        plain.close()


def test_a_workflows_steps_continue_the_trace_of_its_publish(app: lanner.App, spans: Spans) -> None:
    provider, exporter = spans
    otel.instrument(app, provider)

    @app.task(queue="math")
    def add(x: int, y: int) -> int:
        return x + y

    with provider.get_tracer("test").start_as_current_span("request") as request:
        handle = lanner.chain(add.s(1, 2), add.s(3)).delay()
    assert lanner.drain(app) == 2
    assert handle.result(timeout=5) == 6

    [publish] = named(exporter, "send math")
    runs = named(exporter, "process math")
    assert len(runs) == 2
    trace = request.get_span_context().trace_id
    assert publish.context is not None
    assert publish.context.trace_id == trace
    assert all(run.context is not None and run.context.trace_id == trace for run in runs)

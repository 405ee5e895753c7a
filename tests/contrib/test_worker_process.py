"""Tracing and error reports across processes: this process publishes under a span, and
`lanner worker` (a real pool, its children forked after the module set up OpenTelemetry
and Sentry) continues the trace and reports the error, each writing what it would export
or send to a file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import lanner
from lanner.contrib import otel

from .workers import lanner_worker

pytestmark = pytest.mark.slow

MODULE = """
import json
import os

import sentry_sdk
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from sentry_sdk.transport import Transport

import lanner
import lanner.contrib.otel
import lanner.contrib.sentry


class FileTransport(Transport):
    def capture_envelope(self, envelope):
        for item in envelope.items:
            if item.type == "event":
                with open(os.environ["EVENTS"], "a") as events:
                    events.write(json.dumps(item.get_event()) + "\\n")


spans = open(os.environ["SPANS"], "a")
exporter = ConsoleSpanExporter(out=spans, formatter=lambda span: span.to_json(indent=None) + "\\n")
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=FileTransport(),
                auto_enabling_integrations=False)

app = lanner.App(os.environ["LANNER_BROKER"])
lanner.contrib.otel.instrument(app)
lanner.contrib.sentry.instrument(app)


@app.task(queue="traced", max_retries=0)
def work(fail):
    if fail:
        raise ValueError("asked to fail")
"""


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    (tmp_path / "traced_tasks.py").write_text(MODULE)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    spans, events = tmp_path / "spans.jsonl", tmp_path / "events.jsonl"
    environment = {**os.environ, "LANNER_BROKER": url, "SPANS": str(spans),
                   "EVENTS": str(events), "PYTHONPATH": str(tmp_path)}  # fmt: skip
    with lanner_worker(["-A", "traced_tasks", "-c", "2"], tmp_path, environment):
        yield url, spans, events


def test_a_pool_continues_the_trace_and_reports_the_error(
    worker: tuple[str, Path, Path],
) -> None:
    url, spans, events = worker
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = lanner.App(url)
    otel.instrument(app, provider)

    @app.task(queue="traced", name="traced_tasks.work", max_retries=0)
    def work(fail: bool) -> None: ...

    try:
        with provider.get_tracer("test").start_as_current_span("request") as request:
            done = work.delay(False)
            failed = work.delay(True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (len(lines(spans)) < 2 or not lines(events)):
            time.sleep(0.1)
    finally:
        app.close()

    runs = {span["attributes"]["messaging.message.id"]: span for span in lines(spans)}
    assert set(runs) == {done, failed}
    sends = {
        span.context.span_id
        for span in exporter.get_finished_spans()
        if span.kind.name == "PRODUCER"
    }
    trace_id = f"0x{request.get_span_context().trace_id:032x}"
    for jid, outcome in ((done, "completed"), (failed, "failed")):
        run = runs[jid]
        assert run["context"]["trace_id"] == trace_id
        assert int(run["parent_id"], 16) in sends
        assert run["attributes"]["lanner.outcome"] == outcome
    [event] = lines(events)
    assert event["tags"]["lanner.jid"] == failed
    assert event["tags"]["lanner.outcome"] == "failed"
    assert event["exception"]["values"][0]["value"] == "asked to fail"

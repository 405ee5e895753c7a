"""What tracing and error reports cost a worker: drain N no-op jobs with a 2-process pool,
print jobs/s and the workers' CPU per job, with the app instrumented or not.

Usage: python scripts/trace-overhead.py URL|sqlite N MODE [pool|drain [sync|async [T]]]

MODE:
    plain      no instrument (what every app pays: the hook's one test per run)
    otel-api   `lanner.contrib.otel` with no SDK: OpenTelemetry's no-op API
    otel       `lanner.contrib.otel` with the SDK: a TracerProvider, a BatchSpanProcessor
               and an exporter that drops what it is given (the export thread's CPU counts)
    otel-10    the same, sampling one trace in ten (ParentBased(TraceIdRatioBased(0.1)))
    sentry     `lanner.contrib.sentry` with a client whose transport drops its envelopes

The jobs are published beforehand, one at a time: when the app is traced, each is the root
of a trace of its own (as a request's would be), whose context its run continues. `pool`
(the default): a 2-process pool (`T` jobs at once per process) drains them, its workers'
CPU read from /proc/<pid>/stat of its children before they are stopped. `drain`: this
process drains them (`lanner.drain`, the same worker loop, no supervisor, no pipes), its
CPU read around it, background threads (the span processor's) included: less noise on a
busy machine (docs/benchmarks.md, "Tracing and error reports"). `hook`: the instruments'
contexts alone around nothing, for 100 popped jobs in turn (N runs, the best of 7
rounds): what the integration itself adds to a run, without the rest of the loop.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import lanner
from lanner.queues import QueueConfig
from lanner.worker.pool import WorkerPool

url, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runner = sys.argv[4] if len(sys.argv) > 4 else "pool"
kind = sys.argv[5] if len(sys.argv) > 5 else "sync"
per_process = int(sys.argv[6]) if len(sys.argv) > 6 else 1
if url == "sqlite":
    url = "sqlite:///" + tempfile.mkdtemp() + "/trace.db"
Q = [QueueConfig("ab", batch_size=100, visibility_timeout_sec=60, long_poll_time_sec=0.25)]
app = lanner.App(url, queues=Q)

if mode == "otel-api":
    from lanner.contrib import otel

    otel.instrument(app)
elif mode in ("otel", "otel-10"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    from lanner.contrib import otel

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    sampler = ParentBased(TraceIdRatioBased(0.1)) if mode == "otel-10" else ALWAYS_ON
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    otel.instrument(app)
elif mode == "sentry":
    import sentry_sdk
    from sentry_sdk.transport import Transport

    from lanner.contrib import sentry

    class Dropping(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            pass

    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=Dropping())
    sentry.instrument(app)
elif mode != "plain":
    raise SystemExit(f"unknown mode {mode!r}")


@app.task(queue="ab", time_limit=30)
def noop() -> None:
    pass


@app.task(queue="ab", time_limit=30)
async def anoop() -> None:
    pass


task = noop if kind == "sync" else anoop
# One at a time in every mode: each job is then the root of a trace of its own when traced,
# and every mode's store holds the same (a SQLite file written by N commits, not N/1000).
for _ in range(n):
    task.delay()
if mode in ("otel", "otel-10"):
    # The publishes' spans are exported now: not by the workers (a forked child keeps its
    # parent's queue of spans), nor during the drain.
    provider.force_flush()


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def in_pool() -> tuple[float, float]:
    """Seconds to drain, and the children's CPU seconds."""
    options: dict[str, Any] = {"tasks_per_process": per_process} if per_process > 1 else {}
    pool = WorkerPool(app, concurrency=2, queues=Q, **options)
    pool.start()
    started = time.monotonic()
    engine = app.engine
    while True:
        pool.supervise(0.02)
        counts = engine.queue_counts("ab")
        if counts.waiting == 0 and counts.running == 0:
            break
    elapsed = time.monotonic() - started
    used = sum(cpu(pid) for pid in pool.children)
    pool.terminate(timeout=10)
    return elapsed, used


def in_process() -> tuple[float, float]:
    """Seconds to drain, and this process's CPU seconds meanwhile."""
    started, cpu_before = time.monotonic(), time.process_time()
    ran = lanner.drain(app, queues=Q)
    if ran != n:
        raise SystemExit(f"{ran} jobs ran, not {n}")
    return time.monotonic() - started, time.process_time() - cpu_before


def hook_alone() -> float:
    """The best CPU seconds of 7 rounds of N runs of the instruments' contexts alone."""
    from lanner.instruments import Run, running
    from lanner.worker.admission import admit

    popped = []  # a hundred jobs, each of its own trace (sampled or not)
    for job in app.engine.pop("ab", "bench", 100):
        task_class, payload, _, _ = admit(job, app.engine.max_data_bytes, app)
        popped.append((job, task_class, payload.headers or {}))

    def runs() -> float:
        before = time.process_time()
        for i in range(n):
            job, task_class, headers = popped[i % len(popped)]
            with running(app, Run(job, task_class, headers)) as run:
                run.outcome = "completed"
        return time.process_time() - before

    return min(runs() for _ in range(7))


if runner == "hook":
    if not app.instruments:
        raise SystemExit("hook: a mode with an instrument")
    print(f"{mode} hook {hook_alone() / n * 1e6:.1f} us/run")
    raise SystemExit(0)
elapsed, used = in_pool() if runner == "pool" else in_process()
rate, per_job = n / elapsed, used / n * 1e6
print(f"{mode} {runner} {kind} t={per_process} {rate:.0f} jobs/s, cpu {per_job:.0f} us/job")

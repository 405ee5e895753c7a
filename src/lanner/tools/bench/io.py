"""The benchmark behind `lanner bench io`: I/O-bound jobs, many at once per worker process.

N jobs that each wait S ms (an `async def` task awaiting `asyncio.sleep`, or a sync one in
`time.sleep`) are published by `publish_many`; then a `WorkerPool` of P processes, each
running up to `tasks_per_process` jobs at once (sync ones in up to `threads` threads), is
started on them. Reported:

- jobs/s from the pool's start to the last completion, as `lanner bench pool` times its
  drain, beside the ceiling: P x (jobs a process runs at once) / S;
- the worker processes' CPU per job (user + system, read from /proc just before the pool
  is terminated), and the supervisor's (this process's, during the drain);
- the worker processes' resident memory at that moment, and the most jobs seen running at
  once (the pool's count, sampled).

A worker process replaced during the run fails it: its CPU time would be lost. Every job is
checked to be complete, never failed: in the store where it can look jobs up, else (SQS) by
how the pool saw each run end. Reads /proc: Linux only.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from lanner.app import App
from lanner.engine import Capability, Engine
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.tools.bench.common import (
    DEFAULT_BATCH,
    DEFAULT_CONCURRENCY,
    DEFAULT_IO_JOBS,
    DEFAULT_SLEEP_MS,
    DEFAULT_TASKS_PER_PROCESS,
    BenchError,
    BenchProgress,
    MachineInfo,
    NoProgress,
    bench_store,
    rate,
    require_counts,
    synchronous_of,
)
from lanner.tools.bench.pool import (
    bench_queue,
    measure_enqueue_batch,
    running_pool,
    verify_complete,
    wait_drained,
)
from lanner.tools.bench.pool_tasks import TASK_TIME_LIMIT, sleep_async, sleep_sync
from lanner.worker.observer import NoObserver
from lanner.worker.pool import WorkerPool

Kind = Literal["async", "sync"]

KINDS: Final[tuple[Kind, ...]] = ("async", "sync")
SAMPLE_EVERY_SEC: Final = 0.25
"""How often the drain asks the pool how many jobs run at once."""

MIB: Final = 1024 * 1024


# -- the worker processes, as /proc shows them ---------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError as error:
        raise BenchError(f"cannot read the CPU time of process {pid}: {error}") from None
    # The name (field 2) is in parentheses and may hold spaces: count from after it.
    # Then: state, ppid, ..., utime and stime are fields 14 and 15 of the whole line.
    fields = text.rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` now, in MiB."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except OSError as error:
        raise BenchError(f"cannot read the memory of process {pid}: {error}") from None
    return pages * os.sysconf("SC_PAGE_SIZE") / MIB


class Outcomes(NoObserver):
    """How the pool's jobs ended, counted by outcome: what verifies a drain on an engine
    that cannot look jobs up (SQS)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def job_finished(self, queue: str, task: str, outcome: str, seconds: float) -> None:
        self.counts[outcome] += 1


def verify_drained(engine: Engine, jids: Sequence[str], outcomes: Outcomes) -> None:
    """Raise `BenchError` unless every job of `jids` is complete (in the store, where it
    can look them up); else unless each ran to completion and none ended otherwise (a job
    completed twice is at-least-once delivery at work, not an error)."""
    if Capability.LOOKUP in engine.capabilities:
        verify_complete(engine, jids)
        return
    completed = outcomes.counts["completed"]
    other = {
        outcome or "unsaid": n for outcome, n in outcomes.counts.items() if outcome != "completed"
    }
    if other or completed < len(jids):
        ended = ", ".join(f"{n} {outcome}" for outcome, n in sorted(other.items()))
        raise BenchError(
            f"of {len(jids)} jobs, {completed} completed" + (f", {ended}" if ended else "")
        )


@dataclass(slots=True)
class _Watch:
    """What the drain samples: the most jobs seen running at once."""

    pool: WorkerPool
    peak_running: int = 0
    _next: float = field(default=0.0)

    def __call__(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + SAMPLE_EVERY_SEC
            self.peak_running = max(self.peak_running, self.pool.counts().running)


# -- the whole benchmark ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IoBenchResult:
    """Results of `run_io_benchmark`; rates are jobs per second, CPU in µs per job."""

    url: str
    synchronous: str | None
    kind: Kind
    jobs: int
    sleep_ms: float
    concurrency: int
    tasks_per_process: int
    threads: int
    event_loop: str
    enqueue_per_s: float
    drain_per_s: float
    startup_s: float
    worker_cpu_us_per_job: float
    supervisor_cpu_us_per_job: float
    rss_mb: tuple[float, ...]
    peak_running: int
    machine: MachineInfo

    @property
    def at_once_per_process(self) -> int:
        """Jobs one process can run at once: sync ones are bound by its threads too."""
        if self.kind == "sync":
            return min(self.tasks_per_process, self.threads)
        return self.tasks_per_process

    @property
    def ceiling_per_s(self) -> float:
        return self.concurrency * self.at_once_per_process / (self.sleep_ms / 1000)

    @property
    def rss_mb_mean(self) -> float:
        return sum(self.rss_mb) / len(self.rss_mb)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "synchronous": self.synchronous,
            "kind": self.kind,
            "jobs": self.jobs,
            "sleep_ms": self.sleep_ms,
            "concurrency": self.concurrency,
            "tasks_per_process": self.tasks_per_process,
            "threads": self.threads,
            "event_loop": self.event_loop,
            "enqueue_per_s": self.enqueue_per_s,
            "drain_per_s": self.drain_per_s,
            "ceiling_per_s": self.ceiling_per_s,
            "startup_s": self.startup_s,
            "worker_cpu_us_per_job": self.worker_cpu_us_per_job,
            "supervisor_cpu_us_per_job": self.supervisor_cpu_us_per_job,
            "rss_mb": list(self.rss_mb),
            "rss_mb_mean": self.rss_mb_mean,
            "peak_running": self.peak_running,
            "machine": self.machine.to_json(),
        }


@dataclass(frozen=True, slots=True)
class _Drain:
    per_s: float
    startup_s: float
    worker_cpu_s: float
    supervisor_cpu_s: float
    rss_mb: tuple[float, ...]
    peak_running: int


def _drain(
    app: App,
    queue: QueueConfig,
    jids: Sequence[str],
    sizes: tuple[int, int, int],
    progress: BenchProgress,
) -> _Drain:
    """Start a pool on the waiting `jids`, wait for all to complete, and read what its
    processes spent before it is terminated."""
    concurrency, tasks_per_process, threads = sizes
    jobs = len(jids)
    outcomes = Outcomes()
    pooled = running_pool(app, queue, concurrency, tasks_per_process, threads, outcomes)
    with pooled as (pool, began):
        children = pool.children
        supervisor_began = time.process_time()
        progress.phase(
            f"drain, {concurrency} processes x {tasks_per_process} jobs (from start)", jobs
        )
        watch = _Watch(pool)
        timing = wait_drained(pool, queue.name, jobs, progress, watch)
        supervisor_cpu = time.process_time() - supervisor_began
        if pool.children != children:
            raise BenchError(
                f"worker processes were replaced during the run ({', '.join(map(str, children))}"
                f" became {', '.join(map(str, pool.children))}): the CPU time of those gone "
                "is lost; see the pool's log for why"
            )
        worker_cpu = sum(cpu_seconds(pid) for pid in children)
        memory = tuple(rss_mb(pid) for pid in children)
    verify_drained(app.engine, jids, outcomes)
    return _Drain(
        per_s=rate(jobs, timing.end - began),
        startup_s=timing.first - began,
        worker_cpu_s=worker_cpu,
        supervisor_cpu_s=supervisor_cpu,
        rss_mb=memory,
        peak_running=watch.peak_running,
    )


def event_loop_of(kind: Kind, tasks_per_process: int) -> str:
    """The event loop the worker processes run async tasks on (concurrent.py, aio.py)."""
    if kind == "async" and tasks_per_process > 1 and importlib.util.find_spec("uvloop"):
        return "uvloop"
    return "asyncio" if kind == "async" else "none"


def run_io_benchmark(
    url: str | None = None,
    jobs: int = DEFAULT_IO_JOBS,
    sleep_ms: float = DEFAULT_SLEEP_MS,
    concurrency: int = DEFAULT_CONCURRENCY,
    tasks_per_process: int = DEFAULT_TASKS_PER_PROCESS,
    threads: int = 1,
    kind: Kind = "async",
    progress: BenchProgress | None = None,
) -> IoBenchResult:
    """Measure a WorkerPool of `concurrency` processes x `tasks_per_process` jobs at once
    draining `jobs` jobs that each wait `sleep_ms` (see the module's docstring).

    With `url` None the store is SQLite (synchronous=full) on a new temporary file.
    Otherwise `url` should name an empty store: the benchmark leaves its `jobs` completed
    jobs there, in a queue `bench-<run id>-io`. Call it from the main thread of a process
    that runs no other pool benchmark: the pool forks this process.
    """
    require_counts(
        jobs=jobs, concurrency=concurrency, tasks_per_process=tasks_per_process, threads=threads
    )
    if not sleep_ms > 0:
        raise ValueError(f"sleep_ms must be more than 0, not {sleep_ms}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    progress = progress or NoProgress()
    queue = bench_queue(f"bench-{uuid.uuid4().hex[:8]}-io", DEFAULT_BATCH)
    with bench_store(url) as store_url:
        app = App(store_url, settings=Settings(broker=store_url), queues=[queue])
        try:
            function = sleep_async if kind == "async" else sleep_sync
            # No retries: a job that fails must show up as failed at once, not 60 s later.
            task = app.task(queue=queue.name, max_retries=0, time_limit=TASK_TIME_LIMIT)(function)
            message = functools.partial(task.message, sleep_ms / 1000)
            enqueue, jids = measure_enqueue_batch(app, message, jobs, DEFAULT_BATCH, progress)
            drain = _drain(app, queue, jids, (concurrency, tasks_per_process, threads), progress)
            synchronous = synchronous_of(store_url)
        finally:
            app.close()
    return IoBenchResult(
        url=store_url,
        synchronous=synchronous,
        kind=kind,
        jobs=jobs,
        sleep_ms=sleep_ms,
        concurrency=concurrency,
        tasks_per_process=tasks_per_process,
        threads=threads,
        event_loop=event_loop_of(kind, tasks_per_process),
        enqueue_per_s=enqueue,
        drain_per_s=drain.per_s,
        startup_s=drain.startup_s,
        worker_cpu_us_per_job=drain.worker_cpu_s / jobs * 1e6,
        supervisor_cpu_us_per_job=drain.supervisor_cpu_s / jobs * 1e6,
        rss_mb=drain.rss_mb,
        peak_running=drain.peak_running,
        machine=MachineInfo.current(),
    )

"""The end-to-end benchmark behind `lanner bench pool`: an App publishing, a real WorkerPool
running.

Phases, all through the public API a user's code would use:

1. enqueue: N/10 `task.delay()` calls, then N jobs by `app.publish_many` in chunks of B;
2. drain: a `WorkerPool` of C processes is started on the N waiting no-op jobs; the rate
   runs from `start()` to the moment the engine shows all N complete, and the time to the
   first finished job (process start-up) is reported on its own;
3. pickup latency: with that pool idle, one job at a time whose task records when it
   starts; latency = the task's start - the moment its `delay()` was called;
4. drain of N/10 jobs that each sleep 10 ms, by the same (already running) pool.

The pool is always terminated, and every job is checked to be complete, never failed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.queues import SimpleQueue
from typing import Any, Final

from lanner.app import App
from lanner.engine import Capability, Engine
from lanner.job import JobState
from lanner.prepared import Message
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.taskfunction import TaskFunction
from lanner.tools.bench.common import (
    DEFAULT_BATCH,
    DEFAULT_CONCURRENCY,
    DEFAULT_JOBS,
    DEFAULT_SAMPLES,
    IDLE_GAP,
    BenchError,
    BenchProgress,
    MachineInfo,
    NoProgress,
    bench_store,
    rate,
    require_counts,
    synchronous_of,
)
from lanner.tools.bench.pool_tasks import SLEEP_SECONDS, BenchTasks, start_channel
from lanner.tools.bench.stats import Percentiles
from lanner.worker.observer import PoolObserver
from lanner.worker.pool import WorkerPool

LONG_POLL_SEC: Final = 0.25
"""The queue's `long_poll_time_sec`. Short, so that an idle worker goes round its loop (and
a stopping one exits) quickly; pickup latency does not depend on it, since a blocked pop
wakes on a commit."""

VISIBILITY_TIMEOUT_SEC: Final = 300.0
"""The queue's lock; the tasks' time limit (`TASK_TIME_LIMIT`) must stay below it."""

STALL_TIMEOUT: Final = 60.0
"""Seconds without a single job finishing before a drain is declared stuck."""

PICKUP_TIMEOUT: Final = 10.0
"""Seconds a latency job may take to start and complete before the phase fails."""

SHUTDOWN_TIMEOUT: Final = 10.0
"""Seconds the pool's children get to exit at the end before they are killed."""

POLL_SEC: Final = 0.002
"""The longest the parent waits on the pool's pipes before looking at the store again."""

VERIFY_CHUNK: Final = 500

# -- the pool -----------------------------------------------------------------------------


def bench_queue(name: str, batch: int) -> QueueConfig:
    """A benchmark's queue: `batch` jobs per pop, a short long poll, a long lock."""
    return QueueConfig(
        name,
        batch_size=batch,
        long_poll_time_sec=LONG_POLL_SEC,
        visibility_timeout_sec=VISIBILITY_TIMEOUT_SEC,
    )


@contextmanager
def running_pool(
    app: App,
    queue: QueueConfig,
    concurrency: int,
    tasks_per_process: int = 1,
    threads: int = 1,
    observer: PoolObserver | None = None,
) -> Iterator[tuple[WorkerPool, float]]:
    """A started pool serving `queue`, and the `time.perf_counter()` just before its start.

    However the block ends, the pool is terminated; if that is interrupted too (a second
    Ctrl-C), its children are killed, so none outlives the benchmark.
    """
    pool = WorkerPool(
        app,
        concurrency=concurrency,
        tasks_per_process=tasks_per_process,
        threads=threads,
        queues=[queue],
        observer=observer,
    )
    started = time.perf_counter()
    try:
        pool.start()
        yield pool, started
    finally:
        try:
            pool.terminate(timeout=SHUTDOWN_TIMEOUT)
        except BaseException:
            for pid in pool.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise


def supervise_for(pool: WorkerPool, seconds: float) -> None:
    """Wait `seconds`, keeping the pool supervised (its children's pipes must be read)."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        pool.supervise(remaining)


def queue_idle(engine: Engine, queue: str) -> bool:
    """Whether `queue` has nothing waiting, scheduled, running or stalled."""
    counts = engine.queue_counts(queue)
    return not (counts.waiting or counts.scheduled or counts.running or counts.stalled)


@dataclass(frozen=True, slots=True)
class DrainTiming:
    """When a drain's first job finished and when all were complete (`perf_counter`), and
    how many had finished at the first moment."""

    first: float
    first_count: int
    end: float


def wait_drained(
    pool: WorkerPool,
    queue: str,
    jobs: int,
    progress: BenchProgress,
    each_round: Callable[[], None] | None = None,
) -> DrainTiming:
    """Supervise `pool` until it has finished `jobs` more jobs and `queue` is idle, calling
    `each_round` (if given) after each supervision round.

    The moment counted is when the store shows the last completion (completions are
    committed per batch, after the jobs' own `finished` reports). Raises `BenchError` if no
    job finishes for `STALL_TIMEOUT` seconds.
    """
    engine = pool.app.engine
    baseline = pool.processed
    done = 0
    first: tuple[float, int] | None = None
    last_progress = time.monotonic()
    while True:
        pool.supervise(POLL_SEC if done >= jobs else 0.05)
        now = time.perf_counter()
        if each_round is not None:
            each_round()
        finished = pool.processed - baseline
        if finished > done:
            progress.advance(min(finished, jobs) - min(done, jobs))
            done, last_progress = finished, time.monotonic()
            if first is None:
                first = (now, done)
        if done >= jobs and queue_idle(engine, queue):
            assert first is not None
            return DrainTiming(first[0], first[1], now)
        if time.monotonic() - last_progress > STALL_TIMEOUT:
            counts = pool.counts()
            raise BenchError(
                f"the pool finished {done} of {jobs} jobs, then nothing for {STALL_TIMEOUT:g}s "
                f"({counts.queued} queued, {counts.running} running, "
                f"{counts.children} processes alive)"
            )


def verify_complete(engine: Engine, jids: Sequence[str]) -> None:
    """Raise `BenchError` unless every job of `jids` is complete (none failed, none left)."""
    states: dict[str, int] = {}
    failure = ""
    for start in range(0, len(jids), VERIFY_CHUNK):
        chunk = jids[start : start + VERIFY_CHUNK]
        found = engine.multiget(chunk)
        states["missing"] = states.get("missing", 0) + len(chunk) - len(found)
        for job in found:
            states[job.state] = states.get(job.state, 0) + 1
            if job.failure is not None and not failure:
                # The message is a whole traceback: its last line says what went wrong.
                lines = job.failure.message.strip().splitlines() or [""]
                failure = f"; first failure ({job.failure.group}): {lines[-1]}"
    wrong = {state: count for state, count in states.items() if count and state != "complete"}
    if wrong:
        found_text = ", ".join(f"{count} {state}" for state, count in sorted(wrong.items()))
        raise BenchError(f"of {len(jids)} jobs, {found_text}{failure}")


# -- measurements -------------------------------------------------------------------------


def measure_enqueue_single(
    delay: Callable[[], str], jobs: int, progress: BenchProgress
) -> tuple[float, list[str]]:
    """Publish `jobs` jobs with one `delay()` (a task's, or its options') call each; return
    jobs/s and their jids."""
    progress.phase("enqueue, task.delay() per job", jobs)
    jids: list[str] = []
    elapsed = 0.0
    step = max(1, jobs // 100)
    # Timed in steps, so that progress reporting stays outside the measurement.
    for start in range(0, jobs, step):
        count = min(step, jobs - start)
        began = time.perf_counter()
        for _ in range(count):
            jids.append(delay())
        elapsed += time.perf_counter() - began
        progress.advance(count)
    return rate(jobs, elapsed), jids


def measure_enqueue_batch(
    app: App, message: Callable[[], Message], jobs: int, batch: int, progress: BenchProgress
) -> tuple[float, list[str]]:
    """Publish `jobs` jobs by `app.publish_many`, `batch` per call, each made by `message()`
    (a task's `message`; building them included, as a caller would); return jobs/s and
    their jids."""
    progress.phase(f"enqueue, publish_many() of {batch}", jobs)
    jids: list[str] = []
    elapsed = 0.0
    for start in range(0, jobs, batch):
        count = min(batch, jobs - start)
        began = time.perf_counter()
        jids.extend(app.publish_many([message() for _ in range(count)]))
        elapsed += time.perf_counter() - began
        progress.advance(count)
    return rate(jobs, elapsed), jids


def measure_pickup(
    pool: WorkerPool,
    task: TaskFunction[[int], None],
    channel: SimpleQueue[tuple[int, float]],
    samples: int,
    progress: BenchProgress,
) -> Percentiles:
    """Latency (ms) from calling `task.delay()` to the task starting in an idle pool.

    Jobs go one at a time, each after the previous one is complete (on an engine that
    cannot look a job up: once the pool has seen it finish) and a random 5–20 ms gap, so
    each sample measures waking an idle pool. The time includes the publish's own commit,
    as a producer would see it.
    """
    progress.phase("pickup latency, idle pool", samples)
    engine = pool.app.engine
    can_look = Capability.LOOKUP in engine.capabilities
    rng = random.Random()
    latencies: list[float] = []
    for sample in range(samples):
        supervise_for(pool, rng.uniform(*IDLE_GAP))
        finished = pool.processed
        published = time.time()
        jid = task.delay(sample)
        deadline = time.monotonic() + PICKUP_TIMEOUT
        started: tuple[int, float] | None = None
        while True:
            if started is None and not channel.empty():
                started = channel.get()
                if started[0] != sample:
                    raise BenchError(f"latency job {sample} reported as {started[0]}")
                latencies.append(started[1] - published)
            if started is not None and not can_look and pool.processed > finished:
                break
            job = engine.get(jid) if started is not None and can_look else None
            if job is not None and job.state == JobState.COMPLETE:
                break
            if job is not None and job.state == JobState.FAILED:
                raise BenchError(f"latency job {jid} failed: {job.failure}")
            if time.monotonic() > deadline:
                raise BenchError(f"latency job {jid} not done in {PICKUP_TIMEOUT:g}s")
            pool.supervise(POLL_SEC)
        progress.advance(1)
    return Percentiles.of(latencies, scale=1000.0)


def measure_sleep_drain(
    app: App,
    pool: WorkerPool,
    task: TaskFunction[[], None],
    jobs: int,
    batch: int,
    progress: BenchProgress,
) -> float:
    """Publish `jobs` jobs that sleep 10 ms to the running, idle pool (`publish_many` of
    `batch`); return jobs/s from the first publish to the last completion."""
    progress.phase(f"drain 10 ms jobs, {pool.concurrency} processes", jobs)
    jids: list[str] = []
    began = time.perf_counter()
    for start in range(0, jobs, batch):
        jids.extend(app.publish_many([task.message() for _ in range(min(batch, jobs - start))]))
    timing = wait_drained(pool, pool.queues[0].name, jobs, progress)
    verify_complete(app.engine, jids)
    return rate(jobs, timing.end - began)


# -- the whole benchmark ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolBenchResult:
    """Results of `run_pool_benchmark`; rates are jobs per second.

    `drain_noop_per_s` runs from the pool's start; `startup_s` is the part of it until the
    first job finished, and `drain_noop_steady_per_s` the rate after that (None if the
    drain was too short to tell).
    """

    url: str
    synchronous: str | None
    jobs: int
    concurrency: int
    batch: int
    samples: int
    single_jobs: int
    sleep_jobs: int
    enqueue_single_per_s: float
    enqueue_batch_per_s: float
    drain_noop_per_s: float
    drain_noop_steady_per_s: float | None
    startup_s: float
    pickup_ms: Percentiles
    drain_sleep10ms_per_s: float
    machine: MachineInfo

    @property
    def sleep_ideal_per_s(self) -> float:
        return self.concurrency / SLEEP_SECONDS

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "synchronous": self.synchronous,
            "jobs": self.jobs,
            "concurrency": self.concurrency,
            "batch": self.batch,
            "samples": self.samples,
            "single_jobs": self.single_jobs,
            "sleep_jobs": self.sleep_jobs,
            "enqueue_single_per_s": self.enqueue_single_per_s,
            "enqueue_batch_per_s": self.enqueue_batch_per_s,
            "drain_noop_per_s": self.drain_noop_per_s,
            "drain_noop_steady_per_s": self.drain_noop_steady_per_s,
            "startup_s": self.startup_s,
            "pickup_ms": self.pickup_ms.as_dict(),
            "drain_sleep10ms_per_s": self.drain_sleep10ms_per_s,
            "drain_sleep10ms_ideal_per_s": self.sleep_ideal_per_s,
            "machine": self.machine.to_json(),
        }


@dataclass(frozen=True, slots=True)
class _PoolFigures:
    drain_per_s: float
    steady_per_s: float | None
    startup_s: float
    pickup: Percentiles
    sleep_per_s: float


def _pool_phases(
    app: App,
    tasks: BenchTasks,
    queue: QueueConfig,
    drain_jids: list[str],
    sizes: tuple[int, int, int, int],
    progress: BenchProgress,
) -> _PoolFigures:
    """Phases 2 to 4, with one pool: the drain, then pickup latency and the sleep drain."""
    concurrency, batch, samples, sleep_jobs = sizes
    jobs = len(drain_jids)
    with start_channel() as channel, running_pool(app, queue, concurrency) as (pool, began):
        progress.phase(f"drain no-op jobs, {concurrency} processes (from start)", jobs)
        timing = wait_drained(pool, queue.name, jobs, progress)
        verify_complete(app.engine, drain_jids)
        remaining = jobs - timing.first_count
        steady = None
        if remaining > 0 and timing.end > timing.first:
            steady = remaining / (timing.end - timing.first)
        pickup = measure_pickup(pool, tasks.record_start, channel, samples, progress)
        sleep = measure_sleep_drain(app, pool, tasks.sleep_10ms, sleep_jobs, batch, progress)
    return _PoolFigures(
        drain_per_s=rate(jobs, timing.end - began),
        steady_per_s=steady,
        startup_s=timing.first - began,
        pickup=pickup,
        sleep_per_s=sleep,
    )


def run_pool_benchmark(
    url: str | None = None,
    jobs: int = DEFAULT_JOBS,
    concurrency: int = DEFAULT_CONCURRENCY,
    batch: int = DEFAULT_BATCH,
    samples: int = DEFAULT_SAMPLES,
    progress: BenchProgress | None = None,
) -> PoolBenchResult:
    """Measure an App and a WorkerPool of `concurrency` processes end to end: enqueue
    rates, no-op drain rate and start-up, idle pickup latency, and a 10 ms-job drain.

    With `url` None the store is SQLite (synchronous=full) on a new temporary file.
    Otherwise `url` should name an empty store: the benchmark leaves its
    `jobs + jobs // 10 + samples` completed jobs there, in a queue `bench-<run id>-pool`
    (the jobs of the single-enqueue phase are cancelled). Call it from the main thread of a
    process that runs no other pool benchmark: the pool forks this process.
    """
    require_counts(jobs=jobs, concurrency=concurrency, batch=batch, samples=samples)
    progress = progress or NoProgress()
    small = max(1, jobs // 10)
    run = uuid.uuid4().hex[:8]
    queue = bench_queue(f"bench-{run}-pool", batch)
    with bench_store(url) as store_url:
        app = App(store_url, settings=Settings(broker=store_url), queues=[queue])
        try:
            tasks = BenchTasks.register(app, queue.name)
            # The single publishes go to a queue no worker serves, and are cancelled after.
            single_task = tasks.noop.options(queue=f"bench-{run}-single")
            single_rate, single_jids = measure_enqueue_single(single_task.delay, small, progress)
            app.engine.cancel(single_jids)
            batch_rate, drain_jids = measure_enqueue_batch(
                app, tasks.noop.message, jobs, batch, progress
            )
            figures = _pool_phases(
                app, tasks, queue, drain_jids, (concurrency, batch, samples, small), progress
            )
            synchronous = synchronous_of(store_url)
        finally:
            app.close()
    return PoolBenchResult(
        url=store_url,
        synchronous=synchronous,
        jobs=jobs,
        concurrency=concurrency,
        batch=batch,
        samples=samples,
        single_jobs=small,
        sleep_jobs=small,
        enqueue_single_per_s=single_rate,
        enqueue_batch_per_s=batch_rate,
        drain_noop_per_s=figures.drain_per_s,
        drain_noop_steady_per_s=figures.steady_per_s,
        startup_s=figures.startup_s,
        pickup_ms=figures.pickup,
        drain_sleep10ms_per_s=figures.sleep_per_s,
        machine=MachineInfo.current(),
    )

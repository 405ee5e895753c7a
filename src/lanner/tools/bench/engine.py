"""The engine benchmark behind `lanner bench engine`: put and drain throughput, then the
pickup latency (`lanner.tools.bench.pickup`), in one run on one store.

On an engine that counts the requests it sends (`engine.requests`, by API name: SQS, where
each request is billed), each throughput phase also reports requests per job, the drain
phases summing those of their child processes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from lanner.engine import Capability, Engine
from lanner.engines import open_engine
from lanner.records import NewJob
from lanner.tools.bench.children import ChildContext, ChildGroup, parent_alive
from lanner.tools.bench.common import (
    DEFAULT_BATCH,
    DEFAULT_JOBS,
    DEFAULT_SAMPLES,
    KLASS,
    BenchError,
    BenchProgress,
    MachineInfo,
    NoProgress,
    bench_store,
    rate,
    require_counts,
    synchronous_of,
)
from lanner.tools.bench.pickup import measure_pickup, measure_redis_floor
from lanner.tools.bench.stats import Percentiles

STALL_TIMEOUT: Final = 120.0
"""Seconds without any word from the children before a phase is declared stuck."""

_T = TypeVar("_T")


# -- what the children run ----------------------------------------------------------------
def drain_worker(
    context: ChildContext, url: str, queue: str, worker: str, batch: int, result: str | None
) -> None:
    """Child: pop `batch` jobs at a time and complete them (each keeping `result`, JSON
    text, unless None) until `queue` gives none (or the parent is gone).

    Reports `progress` (jobs completed) per batch, then `finished` with the time of its
    last completion.
    """
    engine = open_engine(url)
    try:
        context.send("ready")
        context.wait_for_start()
        sent_before = requests_sent(engine)
        last_completion = 0.0
        while parent_alive() and (jobs := engine.pop(queue, worker, batch)):
            jids = [job.jid for job in jobs]
            results = None if result is None else dict.fromkeys(jids, result)
            done = engine.complete_many(jids, worker, queue, results=results)
            last_completion = time.time()
            context.send("progress", amount=len(done))
        sent = requests_sent(engine)
        if sent is not None and sent_before is not None:
            context.send("requests", amount=sent - sent_before)
        context.send("finished", value=last_completion)
    finally:
        engine.close()


# -- measurements -------------------------------------------------------------------------
def requests_sent(engine: Engine) -> int | None:
    """How many requests the engine sent so far, if it counts them (`engine.requests`)."""
    counted = getattr(engine, "requests", None)
    return sum(counted.values()) if isinstance(counted, dict) else None


def per_job(before: int | None, after: int | None, jobs: int) -> float | None:
    return None if before is None or after is None else (after - before) / jobs


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _new_jobs(queue: str, count: int) -> list[NewJob]:
    return [
        NewJob(queue=queue, jid=uuid.uuid4().hex, klass=KLASS, data=json.dumps({"n": n}))
        for n in range(count)
    ]


def measure_put_single(
    engine: Engine, queue: str, jobs: int, batch: int, progress: BenchProgress
) -> float:
    """Put `jobs` jobs into `queue`, one `put` call each; return jobs per second."""
    progress.phase("put, 1 job per call", jobs)
    elapsed = 0.0
    # Timed per chunk so that progress reporting stays outside the measurement.
    for chunk in _chunks(_new_jobs(queue, jobs), batch):
        started = time.perf_counter()
        for job in chunk:
            engine.put(job.queue, job.jid, job.klass, job.data)
        elapsed += time.perf_counter() - started
        progress.advance(len(chunk))
    return rate(jobs, elapsed)


def measure_put_batch(
    engine: Engine, queue: str, jobs: int, batch: int, progress: BenchProgress
) -> float:
    """Put `jobs` jobs into `queue` with `put_many`, `batch` per call; return jobs per second."""
    progress.phase(f"put_many, {batch} jobs per call", jobs)
    elapsed = 0.0
    for chunk in _chunks(_new_jobs(queue, jobs), batch):
        started = time.perf_counter()
        engine.put_many(chunk)
        elapsed += time.perf_counter() - started
        progress.advance(len(chunk))
    return rate(jobs, elapsed)


def measure_drain(
    url: str,
    queue: str,
    jobs: int,
    batch: int,
    processes: int,
    progress: BenchProgress,
    result: str | None = None,
) -> tuple[float, float | None]:
    """Drain `queue`, which holds exactly `jobs` waiting jobs, with `processes` children
    looping `pop(batch)` + `complete_many` (each job keeping `result` unless None); return
    jobs per second, from the common start to the last completion, and the children's
    requests per job (None if their engine does not count them). Raises `BenchError`
    if fewer than `jobs` jobs were completed."""
    plural = "es" if processes > 1 else ""
    progress.phase(f"pop + complete_many, {processes} process{plural}", jobs)
    completed = 0
    requests: int | None = None
    last_completions: list[float] = []
    with ChildGroup() as group:
        for index in range(processes):
            group.spawn(drain_worker, url, queue, f"bench-drain-{index}", batch, result)
        group.wait_ready()
        started = group.go()
        while len(last_completions) < processes:
            message = group.receive(STALL_TIMEOUT)
            if message.kind == "progress":
                completed += message.amount
                progress.advance(message.amount)
            elif message.kind == "requests":
                requests = (requests or 0) + message.amount
            elif message.kind == "finished":
                last_completions.append(message.value)
            else:
                raise BenchError(f"unexpected message from a drain process: {message!r}")
        group.join()
    # More is a job delivered twice (a send retried after a timeout on a loaded machine):
    # at-least-once allows it. Fewer is a job lost.
    if completed < jobs:
        raise BenchError(f"{processes} drain process(es) completed {completed} of {jobs} jobs")
    spent = None if requests is None else requests / jobs
    return rate(jobs, max(last_completions) - started), spent


def verify_drained(engine: Engine, queue: str) -> None:
    """Raise `BenchError` if `queue` still holds any job that is not complete."""
    counts = engine.queue_counts(queue)
    left = {
        "waiting": counts.waiting,
        "running": counts.running,
        "stalled": counts.stalled,
        "scheduled": counts.scheduled,
        "depends": counts.depends,
    }
    if any(left.values()):
        found = ", ".join(f"{count} {state}" for state, count in left.items() if count)
        raise BenchError(f"queue {queue!r} was not drained: {found}")


# -- the whole benchmark ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EngineBenchResult:
    """Results of `run_engine_benchmark`; rates are jobs per second."""

    url: str
    synchronous: str | None
    jobs: int
    batch: int
    samples: int
    result_bytes: int
    """The size of the result each drained job kept (0: none)."""
    put_single_per_s: float
    put_batch_per_s: float
    drain_1proc_per_s: float
    drain_2proc_per_s: float
    pickup_ms: Percentiles
    pickup_floor_ms: Percentiles | None
    """Redis only: the machine's share of pickup latency (see `measure_redis_floor`)."""
    machine: MachineInfo
    requests_per_job: dict[str, float] | None = None
    """Where the engine counts its requests (SQS): per job, for `put`, `put_many`, `drain_1`
    and `drain_2` (pop + complete_many), and `steady` (put_many + the 2-process drain)."""

    def to_json(self) -> dict[str, Any]:
        floor = self.pickup_floor_ms
        return {
            "url": self.url,
            "synchronous": self.synchronous,
            "jobs": self.jobs,
            "batch": self.batch,
            "samples": self.samples,
            "result_bytes": self.result_bytes,
            "put_single_per_s": self.put_single_per_s,
            "put_batch_per_s": self.put_batch_per_s,
            "drain_1proc_per_s": self.drain_1proc_per_s,
            "drain_2proc_per_s": self.drain_2proc_per_s,
            "pickup_ms": self.pickup_ms.as_dict(),
            "pickup_floor_ms": None if floor is None else floor.as_dict(),
            "machine": self.machine.to_json(),
            "requests_per_job": self.requests_per_job,
        }


def run_engine_benchmark(
    url: str | None = None,
    jobs: int = DEFAULT_JOBS,
    batch: int = DEFAULT_BATCH,
    samples: int = DEFAULT_SAMPLES,
    progress: BenchProgress | None = None,
    result_bytes: int = 0,
) -> EngineBenchResult:
    """Measure an engine: put rates (single and batched), drain rates (1 and 2 processes)
    and pickup latency (on Redis, also the machine's floor under it). With `result_bytes`,
    each drained job keeps a result of that many bytes (what results cost).

    With `url` None the engine is SQLite on a new temporary file. Otherwise `url` should
    name an empty store: the benchmark leaves its `2 * jobs + samples + 1` completed jobs
    there, in queues named `bench-<run id>-...`.
    """
    require_counts(jobs=jobs, batch=batch, samples=samples)
    if result_bytes < 0:
        raise ValueError(f"result_bytes must be at least 0, not {result_bytes}")
    result = json.dumps("r" * max(0, result_bytes - 2)) if result_bytes else None
    progress = progress or NoProgress()
    run = uuid.uuid4().hex[:8]
    single_queue, batch_queue, pickup_queue = (
        f"bench-{run}-{q}" for q in ("put", "many", "pickup")
    )
    with bench_store(url) as store_url:
        synchronous = synchronous_of(store_url)
        engine = open_engine(store_url)
        try:
            if Capability.BLOCKING_POP not in engine.capabilities:
                raise BenchError(f"the {engine.name} engine has no blocking pop to measure")
            sent = [requests_sent(engine)]
            put_single = measure_put_single(engine, single_queue, jobs, batch, progress)
            sent.append(requests_sent(engine))
            put_batch = measure_put_batch(engine, batch_queue, jobs, batch, progress)
            sent.append(requests_sent(engine))
            # The put phases left `jobs` waiting jobs in each queue: drain those.
            drain_1, drain_1_requests = measure_drain(
                store_url, single_queue, jobs, batch, 1, progress, result
            )
            verify_drained(engine, single_queue)
            drain_2, drain_2_requests = measure_drain(
                store_url, batch_queue, jobs, batch, 2, progress, result
            )
            verify_drained(engine, batch_queue)
            requests = _requests_per_job(sent, jobs, drain_1_requests, drain_2_requests)
            pickup = measure_pickup(engine, store_url, pickup_queue, samples, progress)
            floor = None
            if engine.name == "redis":
                floor = measure_redis_floor(store_url, f"bench-{run}-floor", samples, progress)
        finally:
            engine.close()
    return EngineBenchResult(
        url=store_url,
        synchronous=synchronous,
        jobs=jobs,
        batch=batch,
        samples=samples,
        result_bytes=result_bytes,
        put_single_per_s=put_single,
        put_batch_per_s=put_batch,
        drain_1proc_per_s=drain_1,
        drain_2proc_per_s=drain_2,
        pickup_ms=pickup,
        pickup_floor_ms=floor,
        machine=MachineInfo.current(),
        requests_per_job=requests,
    )


def _requests_per_job(
    sent: list[int | None], jobs: int, drain_1: float | None, drain_2: float | None
) -> dict[str, float] | None:
    put, put_many = per_job(sent[0], sent[1], jobs), per_job(sent[1], sent[2], jobs)
    if put is None or put_many is None or drain_1 is None or drain_2 is None:
        return None
    return {
        "put": put,
        "put_many": put_many,
        "drain_1": drain_1,
        "drain_2": drain_2,
        "steady": put_many + drain_2,
    }

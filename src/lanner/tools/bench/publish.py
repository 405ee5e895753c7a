"""`lanner bench publish`: single `.delay()` calls, one job each, from T threads in each of
P processes at once (SQLite's group commit, `engines/sqlite/walsync.py`, shares one fsync
among the commits made while another runs).

Each process makes its own App and task, publishes one job first (opening the store,
not counted), waits for the others, then its threads publish their share of the jobs one
`.delay()` at a time, timing each call. Reported: jobs/s from the first call to the last
(all processes), the publishers' CPU per publish (user + system, every thread, the
fsync's kernel time included), and each call's latency.

Runnable as a script too (`python src/lanner/tools/bench/publish.py --threads 4 --url URL`),
with an older checkout's `src` first on PYTHONPATH: it uses only `App`, `app.task` and
`.delay()`, so a commit from before this benchmark can be measured by it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from typing import Any

from lanner.tools.bench.common import (
    BenchError,
    BenchProgress,
    MachineInfo,
    NoProgress,
    bench_store,
    rate,
)
from lanner.tools.bench.stats import percentile

TASK_NAME = "lanner.tools.bench.publish_noop"


def noop() -> None:
    """The task published (no worker runs it)."""


@dataclass(frozen=True, slots=True)
class PublishBenchResult:
    url: str
    jobs: int
    threads: int
    processes: int
    per_s: float
    cpu_us: float
    latency_ms: dict[str, float]
    machine: MachineInfo

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "jobs": self.jobs,
            "threads": self.threads,
            "processes": self.processes,
            "publish_per_s": round(self.per_s, 1),
            "cpu_us_per_publish": round(self.cpu_us, 1),
            "latency_ms": self.latency_ms,
            "machine": self.machine.to_json(),
        }


def run_publish_benchmark(
    url: str | None,
    jobs: int,
    threads: int,
    processes: int,
    progress: BenchProgress | None = None,
) -> PublishBenchResult:
    """Publish `jobs` jobs by single `.delay()` calls from `threads` threads in each of
    `processes` processes (the last share a little larger when they do not divide)."""
    progress = progress or NoProgress()
    with bench_store(url) as store:
        progress.phase(f"{jobs:,} single .delay() calls, {processes}×{threads} threads", 1)
        shares = [jobs // processes + (1 if p < jobs % processes else 0) for p in range(processes)]
        if processes == 1:
            outcomes = [_publisher(store, shares[0], threads, None)]
        else:
            outcomes = _in_processes(store, shares, threads)
        progress.advance()
    start = min(outcome["start"] for outcome in outcomes)
    end = max(outcome["end"] for outcome in outcomes)
    latencies = [ms for outcome in outcomes for ms in outcome["latencies"]]
    cpu = sum(outcome["cpu"] for outcome in outcomes)
    return PublishBenchResult(
        url=url or "sqlite (temporary file, synchronous=full)",
        jobs=jobs,
        threads=threads,
        processes=processes,
        per_s=rate(jobs, end - start),
        cpu_us=cpu / jobs * 1e6,
        latency_ms={f"p{q}": round(percentile(latencies, q), 3) for q in (50, 95, 99)},
        machine=MachineInfo.current(),
    )


def _in_processes(url: str, shares: list[int], threads: int) -> list[dict[str, Any]]:
    """`_publisher` in a spawned process per share, started together (a barrier)."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(shares))
    results = context.SimpleQueue()
    children = [
        context.Process(target=_child, args=(url, share, threads, barrier, results))
        for share in shares
    ]
    for child in children:
        child.start()
    outcomes = [results.get() for _ in children]
    for child in children:
        child.join()
    failed = [outcome for outcome in outcomes if "error" in outcome]
    if failed:
        raise BenchError(f"a publishing process failed: {failed[0]['error']}")
    return outcomes


def _child(url: str, jobs: int, threads: int, barrier: Barrier, results: Any) -> None:
    try:
        results.put(_publisher(url, jobs, threads, barrier))
    except BaseException as error:
        barrier.abort()
        results.put({"error": repr(error)})


def _publisher(url: str, jobs: int, threads: int, barrier: Barrier | None) -> dict[str, Any]:
    """One process's publishing: its threads' calls, timed; its CPU over them."""
    import lanner

    app = lanner.App(broker=url)
    task = app.task(name=TASK_NAME)(noop)
    task.delay()  # opens the store: not counted
    if barrier is not None:
        barrier.wait()
    shares = [jobs // threads + (1 if t < jobs % threads else 0) for t in range(threads)]
    latencies: list[list[float]] = [[] for _ in shares]
    go = threading.Event()

    def publish(share: int, into: list[float]) -> None:
        go.wait()
        for _ in range(share):
            began = time.perf_counter()
            task.delay()
            into.append((time.perf_counter() - began) * 1000)

    workers = [
        threading.Thread(target=publish, args=(share, into))
        for share, into in zip(shares, latencies, strict=True)
    ]
    for worker in workers:
        worker.start()
    cpu_before = _cpu()
    start = time.time()
    go.set()
    for worker in workers:
        worker.join()
    end = time.time()
    app.close()
    return {
        "start": start,
        "end": end,
        "cpu": _cpu() - cpu_before,
        "latencies": [ms for into in latencies for ms in into],
    }


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--processes", type=int, default=1)
    given = parser.parse_args()
    result = run_publish_benchmark(given.url, given.jobs, given.threads, given.processes)
    print(json.dumps(result.to_json()))


if __name__ == "__main__":
    main()

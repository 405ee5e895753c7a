"""`lanner bench depth`: an engine with a deep backlog (after an outage, a bulk import).

The store is filled with no-op jobs by `put_many` (chunks of PUT_CHUNK, spread evenly over
`queues` queues, their jids made as lanner's publishers make them) up to each depth in
turn; at each depth it measures
- the fill's rate (jobs/s of the `put_many` calls that brought it there);
- `pop` of one job and its `complete`, one after the other, `samples` times (the jobs
  popped are put back first, so the depth stays put), as p50/p99 in ms;
- a single `put` (p50/p99 ms), and what `lanner status` asks (`queues()` and, where the
  engine counts them, `failed_groups()`), timed once cold and the median of 5;
- the store's size per job: SQLite's file and WAL bytes, Redis's `used_memory` growth
  (and so jobs per GB); SQS has no size to ask;
- this process's RSS (it publishes and pops: one process plays both, so its RSS bounds
  either's);
- where the engine counts the requests it sends (SQS, where each is billed): requests per
  job of the fill, per pop + complete, per single put and per status.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from rich.table import Table

from lanner.engine import Capability, Engine
from lanner.engines import open_engine
from lanner.records import NewJob
from lanner.task import time_ordered_id
from lanner.tools.bench.common import KLASS, BenchError, BenchProgress
from lanner.tools.bench.engine import requests_sent
from lanner.tools.bench.stats import Percentiles

PUT_CHUNK: Final = 1000
DEFAULT_DEPTHS: Final = (1_000, 100_000, 1_000_000)
WORKER: Final = "bench-depth"
DATA: Final = json.dumps({"v": 1, "args": []}, separators=(",", ":"))


@dataclass(frozen=True)
class DepthPoint:
    depth: int
    fill_jobs_per_s: float
    pop_complete_ms: dict[str, float]
    put_ms: dict[str, float]
    status_ms: float  # queues() + failed_groups(), median of 5
    status_cold_ms: float  # the first, right after the fill
    bytes_per_job: float | None  # SQLite: file + WAL; Redis: used_memory growth
    rss_mb: float
    requests: dict[str, float] | None = None  # per fill job, pop + complete, put, status


@dataclass(frozen=True)
class DepthBenchResult:
    url: str
    queues: int
    samples: int
    points: list[DepthPoint]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Store:
    """How big the store is, in bytes (None: the engine cannot say)."""

    def __init__(self, url: str) -> None:
        self._path: Path | None = None
        self._redis: Any = None
        if url.startswith("sqlite:///"):
            self._path = Path(url.removeprefix("sqlite:///").split("?")[0])
        elif url.startswith(("redis:", "rediss:")):
            import redis

            self._redis = redis.Redis.from_url(url.split("?")[0])

    def size(self) -> float | None:
        if self._path is not None:
            wal = Path(f"{self._path}-wal")
            return self._path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        if self._redis is not None:
            return float(self._redis.info("memory")["used_memory"])
        return None


def _fill(engine: Engine, queues: Sequence[str], count: int, progress: BenchProgress) -> float:
    """Put `count` jobs, round-robin over `queues`, by put_many; the jobs/s it took."""
    took = 0.0
    for start in range(0, count, PUT_CHUNK):
        size = min(PUT_CHUNK, count - start)
        queue = queues[(start // PUT_CHUNK) % len(queues)]
        jobs = [NewJob(queue, time_ordered_id(), KLASS, DATA) for _ in range(size)]
        began = time.perf_counter()
        engine.put_many(jobs)
        took += time.perf_counter() - began
        progress.advance(size)
    return count / took if took else 0.0


def _pop_complete(
    engine: Engine, queues: Sequence[str], samples: int
) -> tuple[list[float], list[float], _Sent]:
    """Seconds of each pop + complete, and of each single put (which keeps the depth);
    the requests both sent in all, where the engine counts them."""
    cycles, puts = [], []
    sent = _Sent(engine)
    for n in range(samples):
        queue = queues[n % len(queues)]
        began = time.perf_counter()
        with sent.counting("put"):
            engine.put(queue, time_ordered_id(), KLASS, DATA)
        puts.append(time.perf_counter() - began)
        began = time.perf_counter()
        with sent.counting("pop_complete"):
            jobs = engine.pop(queue, WORKER, 1)
            if not jobs:
                raise BenchError(f"pop from {queue!r} found nothing at depth")
            engine.complete_many([jobs[0].jid], WORKER, queue)
        cycles.append(time.perf_counter() - began)
    return cycles, puts, sent


class _Sent:
    """Requests an engine sent, by what it was doing (nothing where it does not count them)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.counted: dict[str, int] | None = None if requests_sent(engine) is None else {}

    @contextlib.contextmanager
    def counting(self, what: str) -> Iterator[None]:
        before = requests_sent(self._engine)
        yield
        after = requests_sent(self._engine)
        if self.counted is not None and before is not None and after is not None:
            self.counted[what] = self.counted.get(what, 0) + after - before


def _status(engine: Engine) -> float:
    began = time.perf_counter()
    engine.queues()
    if Capability.FAILURES in engine.capabilities:
        engine.failed_groups()
    return time.perf_counter() - began


def run_depth_bench(
    url: str,
    depths: Sequence[int] = DEFAULT_DEPTHS,
    queues: int = 1,
    samples: int = 200,
    progress: BenchProgress | None = None,
) -> DepthBenchResult:
    """Fill the store at `url` to each of `depths` (ascending) and measure there."""
    from lanner.tools.bench.common import NoProgress

    progress = progress or NoProgress()
    if list(depths) != sorted(set(depths)) or depths[0] < 1:
        raise BenchError("depths must be distinct and ascending, from 1")
    names = [f"depth-{n}" for n in range(queues)]
    engine = open_engine(url)
    store = _Store(url)
    points: list[DepthPoint] = []
    try:
        empty = store.size()
        have = 0
        for depth in depths:
            progress.phase(f"fill to {depth:,}", depth - have)
            sent_before = requests_sent(engine)
            rate = _fill(engine, names, depth - have, progress)
            filled = depth - have
            fill_sent = requests_sent(engine)
            have = depth
            cold = _status(engine)
            status = statistics.median(_status(engine) for _ in range(5))
            status_sent = requests_sent(engine)
            cycles, puts, sent = _pop_complete(engine, names, samples)
            size = store.size()
            per_job = (size - empty) / depth if size is not None and empty is not None else None
            points.append(DepthPoint(
                depth=depth,
                fill_jobs_per_s=rate,
                pop_complete_ms=Percentiles.of(cycles, scale=1000).as_dict(),
                put_ms=Percentiles.of(puts, scale=1000).as_dict(),
                status_ms=status * 1000,
                status_cold_ms=cold * 1000,
                bytes_per_job=per_job,
                rss_mb=_rss_mb(),
                requests=_requests(sent, sent_before, fill_sent, status_sent, filled, samples),
            ))  # fmt: skip
    finally:
        engine.close()
    return DepthBenchResult(url=url, queues=queues, samples=samples, points=points)


def _requests(
    sent: _Sent,
    before: int | None,
    filled: int | None,
    statused: int | None,
    jobs: int,
    samples: int,
) -> dict[str, float] | None:
    if sent.counted is None or before is None or filled is None or statused is None:
        return None
    return {
        "fill_per_job": (filled - before) / jobs,
        "pop_complete": sent.counted.get("pop_complete", 0) / samples,
        "put": sent.counted.get("put", 0) / samples,
        "status": (statused - filled) / 6,  # the cold one and the 5 of the median
    }


def depth_table(result: DepthBenchResult) -> Table:
    table = Table(title=f"lanner bench depth, {result.queues} queue(s), "
                  f"{result.samples} samples per depth")  # fmt: skip
    for column in ("waiting jobs", "put_many jobs/s", "pop+complete p50 / p99 ms",
                   "put p50 / p99 ms", "status ms (cold)", "bytes/job", "RSS MB"):  # fmt: skip
        table.add_column(column, justify="right")
    counted = any(p.requests is not None for p in result.points)
    if counted:
        table.add_column("requests: fill/job, pop+complete, put, status", justify="right")
    for p in result.points:
        row = [
            f"{p.depth:,}", f"{p.fill_jobs_per_s:,.0f}",
            f"{p.pop_complete_ms['p50']:.2f} / {p.pop_complete_ms['p99']:.2f}",
            f"{p.put_ms['p50']:.2f} / {p.put_ms['p99']:.2f}",
            f"{p.status_ms:.1f} ({p.status_cold_ms:.1f})",
            "" if p.bytes_per_job is None else f"{p.bytes_per_job:.0f}", f"{p.rss_mb:.1f}",
        ]  # fmt: skip
        if counted:
            row.append(", ".join(f"{n:.2f}" for n in (p.requests or {}).values()))
        table.add_row(*row)
    return table

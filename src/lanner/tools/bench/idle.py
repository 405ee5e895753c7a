"""The benchmark behind `lanner bench idle`: what an idle worker pool (and dashboard) costs,
and how soon the idle pool starts a job.

1. a `WorkerPool` of C processes on one queue of default settings (as `lanner worker`
   runs one), supervised in rounds as `WorkerPool.run` does, and with `web` the dashboard
   (`lanner web`, a process of its own) on the same store, all idle for S seconds after a
   warm-up: the CPU time (user + system, read from /proc) of each process, in % of one
   core over that wall time;
2. then the pickup latency of single jobs, one at a time, on that pool (as `lanner bench
   pool` measures it).

Linux only (/proc). Only public names of other lanner modules are used here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lanner.app import App
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.tools.bench.common import (
    BenchError,
    BenchProgress,
    MachineInfo,
    NoProgress,
    bench_store,
)
from lanner.tools.bench.pool import measure_pickup, running_pool
from lanner.tools.bench.pool_tasks import BenchTasks, start_channel
from lanner.tools.bench.stats import Percentiles
from lanner.worker.pool import WorkerPool

DEFAULT_SECONDS: Final = 30.0
DEFAULT_IDLE_SAMPLES: Final = 20
WARM_UP_SEC: Final = 3.0
"""How long the pool (and dashboard) run before the measurement: start-up is not idle."""
ROUND_SEC: Final = 0.1
"""The supervisor's rounds, as `WorkerPool.run` makes them."""
_TICKS_PER_SEC: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (all its threads), from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError as error:
        raise BenchError(f"cannot read the CPU time of process {pid} ({error}): "
                         "`lanner bench idle` needs Linux's /proc") from None  # fmt: skip
    fields = stat[stat.rindex(")") + 2 :].split()  # state ppid ... utime (11) stime (12)
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SEC


@dataclass(frozen=True, slots=True)
class IdleBenchResult:
    """CPU % of one core per process while idle, and pickup latency (ms) after."""

    url: str
    concurrency: int
    seconds: float
    supervisor_cpu_pct: float
    worker_cpu_pct: tuple[float, ...]
    web_cpu_pct: float | None
    pickup_ms: Percentiles
    machine: MachineInfo

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "concurrency": self.concurrency,
            "seconds": self.seconds,
            "supervisor_cpu_pct": self.supervisor_cpu_pct,
            "worker_cpu_pct": list(self.worker_cpu_pct),
            "web_cpu_pct": self.web_cpu_pct,
            "pickup_ms": self.pickup_ms.as_dict(),
            "machine": self.machine.to_json(),
        }


@contextlib.contextmanager
def dashboard(url: str) -> Iterator[subprocess.Popen[bytes]]:
    """`lanner web` on `url` (a free loopback port), while inside."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-c", "from lanner.cli import main; main()", "web"]
    with tempfile.TemporaryFile() as said:  # a file, not a pipe nobody reads while idle
        process = subprocess.Popen(
            [*command, "--broker", url, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=said,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                with socket.socket() as client:
                    if client.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    said.seek(0)
                    raise BenchError(f"lanner web did not start: {said.read().decode().strip()}")
                time.sleep(0.05)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure_idle(pool: WorkerPool, others: list[int], seconds: float) -> list[float]:
    """CPU % of one core of this process (the supervisor), `pool`'s children and `others`
    over `seconds` of supervising the idle pool, in that order."""
    pids = [os.getpid(), *pool.children, *others]
    before = [cpu_seconds(pid) for pid in pids]
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        pool.supervise(ROUND_SEC)
    wall = time.monotonic() - began
    after = [cpu_seconds(pid) for pid in pids]
    return [100 * (end - start) / wall for start, end in zip(before, after, strict=True)]


def run_idle_benchmark(
    url: str | None = None,
    concurrency: int = 2,
    seconds: float = DEFAULT_SECONDS,
    samples: int = DEFAULT_IDLE_SAMPLES,
    web: bool = False,
    progress: BenchProgress | None = None,
) -> IdleBenchResult:
    """Measure an idle pool of `concurrency` processes (and with `web` an idle dashboard)
    on `url` (None: a new temporary SQLite file): CPU while idle for `seconds`, then the
    pickup latency of `samples` single jobs, left complete in queue `bench-<run>-idle`."""
    if concurrency < 1 or samples < 1 or seconds <= 0:
        raise ValueError("concurrency and samples must be at least 1, seconds above 0")
    progress = progress or NoProgress()
    queue = QueueConfig(f"bench-{uuid.uuid4().hex[:8]}-idle")  # the defaults a user gets
    with bench_store(url) as store_url:
        app = App(store_url, settings=Settings(broker=store_url), queues=[queue])
        try:
            tasks = BenchTasks.register(app, queue.name)
            app.engine.queues()  # the store exists (a new SQLite file) before the dashboard
            with contextlib.ExitStack() as stack:
                web_pids = [stack.enter_context(dashboard(store_url)).pid] if web else []
                channel = stack.enter_context(start_channel())
                pool, _ = stack.enter_context(running_pool(app, queue, concurrency))
                progress.phase(f"warm-up, {WARM_UP_SEC:g} s", 1)
                measure_idle(pool, [], WARM_UP_SEC)
                progress.advance()
                progress.phase(f"idle for {seconds:g} s", 1)
                figures = measure_idle(pool, web_pids, seconds)
                progress.advance()
                pickup = measure_pickup(pool, tasks.record_start, channel, samples, progress)
        finally:
            app.close()
    return IdleBenchResult(
        url=store_url,
        concurrency=concurrency,
        seconds=seconds,
        supervisor_cpu_pct=figures[0],
        worker_cpu_pct=tuple(figures[1 : 1 + concurrency]),
        web_cpu_pct=figures[-1] if web else None,
        pickup_ms=pickup,
        machine=MachineInfo.current(),
    )

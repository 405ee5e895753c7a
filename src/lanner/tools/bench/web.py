"""`lanner bench web`: what each dashboard page costs its engine, on a store of N jobs.

The store is filled first (jobs across three queues, some tagged, a tenth completed, one
in fifty failed into three groups), then every page is fetched `samples` times from a
dashboard served on a thread of this process (one HTTP connection on loopback), counting
the engine commands each fetch makes (each one SQLite transaction or one Redis script
call) and timing it.
"""

from __future__ import annotations

import functools
import http.client
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from lanner.engine import Capability, Engine
from lanner.engines import open_engine
from lanner.records import NewJob
from lanner.tools.bench.common import BenchError, BenchProgress, MachineInfo, bench_store
from lanner.tools.bench.stats import percentile

QUEUES: Final = ("alpha", "beta", "gamma")
GROUPS: Final = ("tasks.send-ValueError", "tasks.send-KeyError", "tasks.report-Timeout")
BATCH: Final = 1000


@dataclass(frozen=True, slots=True)
class PageCost:
    path: str
    engine_calls: int
    median_ms: float
    p95_ms: float


@dataclass(frozen=True, slots=True)
class WebBenchResult:
    url: str
    jobs: int
    pages: tuple[PageCost, ...]
    machine: MachineInfo

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "jobs": self.jobs,
            "pages": [
                {"path": p.path, "engine_calls": p.engine_calls,
                 "median_ms": p.median_ms, "p95_ms": p.p95_ms}
                for p in self.pages
            ],
            "machine": self.machine.to_json(),
        }  # fmt: skip


def fill(engine: Engine, jobs: int, progress: BenchProgress) -> str:
    """Put `jobs` jobs, complete a tenth and fail one in fifty; return a failed jid."""
    progress.phase("filling the store", jobs)
    tags = ("newsletter",) if Capability.TAGS in engine.capabilities else None
    for start in range(0, jobs, BATCH):
        batch = [
            NewJob(QUEUES[n % 3], f"job-{n:07d}", "tasks.send", f'{{"n": {n}}}',
                   tags=tags if n % 10 == 0 else None)
            for n in range(start, min(jobs, start + BATCH))
        ]  # fmt: skip
        engine.put_many(batch)
        progress.advance(len(batch))
    failed = ""
    settle = jobs // 10 + jobs // 50
    progress.phase("completing and failing some", settle)
    done = 0
    while done < settle:
        popped = engine.pop(QUEUES[done % 3], "bench-worker", min(100, settle - done))
        if not popped:
            break
        failing = popped[: max(1, len(popped) // 6)]
        for n, job in enumerate(failing):
            engine.fail(job.jid, "bench-worker", GROUPS[n % 3], "Traceback ...\nValueError: x")
            failed = job.jid
        engine.complete_many([job.jid for job in popped[len(failing) :]], "bench-worker",
                             popped[0].queue)  # fmt: skip
        done += len(popped)
        progress.advance(len(popped))
    return failed


def count_calls(engine: Engine) -> Callable[[], int]:
    """Wrap the engine's public commands to count them; returns the counter's reader."""
    calls = [0]
    for name in dir(Engine):
        method = getattr(engine, name)
        if name.startswith("_") or not callable(method) or name in ("close", "reopen"):
            continue

        def counted(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            calls[0] += 1
            return _method(*args, **kwargs)

        setattr(engine, name, functools.wraps(method)(counted))
    return lambda: calls[0]


def run_web_benchmark(
    url: str | None, jobs: int, samples: int, progress: BenchProgress
) -> WebBenchResult:
    from lanner.web import WebThread

    with bench_store(url) as store:
        engine = open_engine(store)
        try:
            if Capability.LISTING not in engine.capabilities:
                raise BenchError(f"the {engine.name} engine lists no jobs: nothing to page")
            failed = fill(engine, jobs, progress)
            calls = count_calls(engine)
            paths = ["/", "/fragments/queues", "/queues/alpha",
                     f"/queues/alpha?state=waiting&offset={jobs // 6}", "/failures",
                     f"/jobs?group={GROUPS[0]}", f"/job?jid={failed}", "/jobs?tag=newsletter",
                     "/jobs?state=complete", "/workers", "/metrics"]  # fmt: skip
            costs = []
            progress.phase("fetching pages", len(paths) * samples)
            with WebThread(engine) as web:
                client = http.client.HTTPConnection(web.host, web.port, timeout=60)
                for path in paths:
                    times, before = [], calls()
                    for _ in range(samples):
                        started = time.perf_counter()
                        client.request("GET", path)
                        response = client.getresponse()
                        response.read()
                        if response.status != 200:
                            raise BenchError(f"GET {path}: HTTP {response.status}")
                        times.append((time.perf_counter() - started) * 1000)
                        progress.advance()
                    per_fetch = (calls() - before) // samples
                    costs.append(PageCost(path, per_fetch, percentile(times, 50),
                                          percentile(times, 95)))  # fmt: skip
                client.close()
        finally:
            engine.close()
    return WebBenchResult(store, jobs, tuple(costs), MachineInfo.current())

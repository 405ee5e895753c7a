"""What the chaos tests share: small runs of `lanner.tools.chaos` on either engine, and the checks
every run must pass.

Each test runs one real `lanner worker` pool under one fault (`chaos(...)`), at a scale CI
can afford: a few hundred short jobs on 2 worker processes, leases of a few seconds, the
engine's grace period cut to 1 s, retries 1.5 s apart. Every run also carries the cheap
poison jobs (raise, os._exit, segfault, memory bomb), which must each end in their failure
group whatever the fault. The Redis runs get a private redis-server from the session
fixtures' `redis_server_factory` (so a missing redis-server fails under CI=true), with an
append-only file fsynced on every write, which the harness may kill -9 and start again.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from lanner.tools.chaos import ChaosConfig, FaultPlan, Report, WorkloadSpec, run_chaos

CHEAP_POISONS = ("raise", "exit", "segv", "memory")
AOF = ("--appendonly", "yes", "--appendfsync", "always")
ENGINES = ["sqlite", "redis"]


class FixtureServer(Protocol):
    """What tests/conftest.py's `redis_server_factory` gives."""

    process: Any

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...


class KillableRedis:
    """A fixture server seen as the harness wants it: kill -9 and start again (same port,
    same folder, so its append-only file is what comes back)."""

    def __init__(self, server: FixtureServer) -> None:
        self.server = server

    @property
    def url(self) -> str:
        return self.server.url

    def kill(self) -> None:
        process, self.server.process = self.server.process, None
        if process is not None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def start(self) -> None:
        self.server.start()


Chaos = Callable[..., Report]


@pytest.fixture
def chaos(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Report]:
    """`chaos(engine, faults, **workload)`: one small run; the report.

    `url_options` and `drain_timeout` go to the ChaosConfig; the rest to the WorkloadSpec.
    """

    runs = itertools.count()

    def run(engine: str, faults: FaultPlan, **changes: Any) -> Report:
        config_changes = {
            key: changes.pop(key) for key in ("url_options", "drain_timeout") if key in changes
        }
        spec: dict[str, Any] = {
            "jobs": 300,
            "sleep": 0.01,
            "concurrency": 2,
            "lease": 3.0,
            "retry_delay": 1.5,
            "poisons": CHEAP_POISONS,
            "time_limit_grace": None,  # 1 s, or longer than a stop
            "shutdown_timeout": 10.0,
        }
        spec.update(changes)
        redis = None
        if engine == "redis":
            factory = request.getfixturevalue("redis_server_factory")
            redis = KillableRedis(factory(*AOF))
        config = ChaosConfig(
            engine=engine,
            workload=WorkloadSpec(**spec),
            faults=faults,
            redis=redis,
            grace=1.0,
            drain_timeout=config_changes.get("drain_timeout", 30.0),
            url_options=config_changes.get("url_options", ""),
            folder=tmp_path / f"run{next(runs) or ''}",  # run, run1, ...: one per call
        )
        return run_chaos(config)

    return run


def assert_sound(report: Report) -> None:
    """What every chaos run must show, whatever the fault: nothing lost, no innocent job
    failed, the pool alive and stopped cleanly, every poison job in its failure group with
    its reason, at most the jobs in flight repeated per kill or stop (one, a process running
    one job at a time), no traceback but the tasks' own, nothing left behind."""
    details = f"\n{report.figure_line()}\nproblems: {report.problems()}\nfiles: {report.folder}"
    assert not report.timed_out, "the work did not settle in time" + details
    assert report.lost == 0, details
    assert report.innocent_failed == 0, details
    assert report.pool_exits == [], details
    assert report.final_exit == 0, details
    assert report.faults_not_done == [], details
    bad = [p for p in report.poison if not p.ok]
    assert bad == [], details
    assert report.dup <= report.dup_bound, details
    assert report.tracebacks == 0, report.first_traceback + details
    assert not report.corrupt, details
    assert report.stray == 0, details
    assert report.leaked_after_settle == report.leaked == 0, details
    assert report.rogue_starts == report.rogue_ends == 0, details

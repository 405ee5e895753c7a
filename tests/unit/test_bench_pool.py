"""Tests of `lanner bench pool`: argument checks, job verification and a smoke run.

Never of speed: the numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from click.testing import CliRunner

from lanner.app import App
from lanner.cli import main
from lanner.settings import Settings
from lanner.tools.bench import pool_tasks
from lanner.tools.bench.common import BenchError
from lanner.tools.bench.pool import run_pool_benchmark, verify_complete


@pytest.mark.parametrize(
    ("jobs", "concurrency", "batch", "samples"),
    [(0, 1, 1, 1), (1, 0, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0)],
)
def test_benchmark_rejects_empty_sizes(
    jobs: int, concurrency: int, batch: int, samples: int
) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_pool_benchmark(None, jobs, concurrency, batch, samples)


def test_verify_complete_reports_jobs_left_and_missing(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'v.db').as_posix()}"
    app = App(url, settings=Settings(broker=url))
    try:
        waiting = app.engine.put("q", "j1", "lanner.tools.bench.Noop", "{}")
        with pytest.raises(BenchError, match="of 2 jobs, 1 missing, 1 waiting"):
            verify_complete(app.engine, [waiting, "nope"])
    finally:
        app.close()


@pytest.mark.slow
def test_bench_pool_json_smoke() -> None:
    result = CliRunner().invoke(
        main,
        ["bench", "pool", "--jobs", "200", "-c", "2", "--batch", "20", "--samples", "5", "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["jobs"], report["concurrency"], report["batch"]) == (200, 2, 20)
    assert (report["samples"], report["single_jobs"], report["sleep_jobs"]) == (5, 20, 20)
    assert report["url"].startswith("sqlite:///")
    assert report["synchronous"] == "full"
    for key in (
        "enqueue_single_per_s",
        "enqueue_batch_per_s",
        "drain_noop_per_s",
        "startup_s",
        "drain_sleep10ms_per_s",
    ):
        assert isinstance(report[key], float), key
        assert report[key] > 0, key
    steady = report["drain_noop_steady_per_s"]
    assert steady is None or steady > 0
    assert report["drain_sleep10ms_ideal_per_s"] == pytest.approx(200.0)
    assert set(report["pickup_ms"]) == {"p50", "p95", "p99", "max"}
    for name, ms in report["pickup_ms"].items():
        assert ms > 0, name
    assert report["pickup_ms"]["max"] >= report["pickup_ms"]["p50"]
    assert set(report["machine"]) == {"platform", "cpu_count", "python", "sqlite", "lanner"}
    # The pool was terminated: no worker process is left behind.
    assert multiprocessing.active_children() == []


def fail_always() -> None:
    raise ValueError("no-op that fails")


@pytest.mark.slow
def test_failed_jobs_fail_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    # The benchmark makes its tasks of the module's functions at each run.
    monkeypatch.setattr(pool_tasks, "noop", fail_always)
    with pytest.raises(BenchError, match=r"of 40 jobs, 40 failed; .*ValueError: no-op that fails"):
        run_pool_benchmark(None, jobs=40, concurrency=1, batch=10, samples=1)
    assert multiprocessing.active_children() == []

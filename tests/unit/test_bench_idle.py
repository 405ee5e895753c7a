"""A smoke run of `lanner bench idle` (never of speed: that depends on the machine)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from click.testing import CliRunner

from lanner.cli import main
from lanner.tools.bench.common import BenchError
from lanner.tools.bench.idle import cpu_seconds, run_idle_benchmark


def test_the_idle_benchmark_rejects_empty_sizes() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_idle_benchmark(None, concurrency=0)


def test_cpu_seconds_of_a_process_and_of_none() -> None:
    spent = cpu_seconds(os.getpid())
    sum(range(3_000_000))  # tens of milliseconds of CPU
    assert cpu_seconds(os.getpid()) > spent
    with pytest.raises(BenchError, match="needs Linux's /proc"):
        cpu_seconds(2**22 + 1)  # above Linux's largest pid


@pytest.mark.slow
def test_bench_idle_json_smoke() -> None:
    result = CliRunner().invoke(
        main, ["bench", "idle", "-c", "2", "--seconds", "1", "--samples", "3", "--web", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["concurrency"], report["seconds"]) == (2, 1.0)
    assert report["url"].startswith("sqlite:///")
    assert len(report["worker_cpu_pct"]) == 2
    for cpu in [report["supervisor_cpu_pct"], report["web_cpu_pct"], *report["worker_cpu_pct"]]:
        assert 0 <= cpu <= 100 * multiprocessing.cpu_count()
    assert set(report["pickup_ms"]) == {"p50", "p95", "p99", "max"}
    assert 0 < report["pickup_ms"]["p50"] <= report["pickup_ms"]["max"]
    assert multiprocessing.active_children() == []  # the pool was terminated

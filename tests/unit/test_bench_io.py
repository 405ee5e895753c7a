"""Tests of `lanner bench io`: argument checks, smoke runs, and the runs it must refuse to
report (failed jobs, a worker process replaced).

Never of speed: the numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lanner import open_engine
from lanner.cli import main
from lanner.tools.bench import io
from lanner.tools.bench.common import BenchError
from lanner.tools.bench.io import run_io_benchmark


@pytest.mark.parametrize(
    "sizes",
    [
        {"jobs": 0},
        {"concurrency": 0},
        {"tasks_per_process": 0},
        {"threads": 0},
        {"sleep_ms": 0.0},
        {"kind": "threads"},
    ],
)
def test_benchmark_rejects_bad_sizes(sizes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        run_io_benchmark(None, **sizes)


def bench_io(*arguments: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["bench", "io", *arguments, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    # The pool was terminated: no worker process is left behind.
    assert multiprocessing.active_children() == []
    return report


def assert_measured(report: dict[str, Any], processes: int) -> None:
    for key in ("enqueue_per_s", "drain_per_s", "startup_s", "rss_mb_mean"):
        assert isinstance(report[key], float), key
        assert report[key] > 0, key
    # CPU time is counted in clock ticks (10 ms): a short run may show none.
    for key in ("worker_cpu_us_per_job", "supervisor_cpu_us_per_job"):
        assert isinstance(report[key], float), key
        assert report[key] >= 0, key
    assert len(report["rss_mb"]) == processes
    assert report["peak_running"] >= 0
    assert set(report["machine"]) == {"platform", "cpu_count", "python", "sqlite", "lanner"}


@pytest.mark.slow
def test_bench_io_json_smoke() -> None:
    # The run itself checks that every job completed: it fails otherwise.
    report = bench_io("--jobs", "50")
    assert (report["jobs"], report["kind"], report["sleep_ms"]) == (50, "async", 10.0)
    assert (report["concurrency"], report["tasks_per_process"], report["threads"]) == (2, 100, 1)
    assert report["url"].startswith("sqlite:///")
    assert report["synchronous"] == "full"
    assert report["event_loop"] in ("asyncio", "uvloop")
    assert report["ceiling_per_s"] == pytest.approx(2 * 100 / 0.010)
    assert_measured(report, processes=2)


@pytest.mark.slow
def test_bench_io_sync_jobs_in_threads() -> None:
    report = bench_io("--jobs", "20", "--kind", "sync", "-c", "1", "-t", "4", "--threads", "2")
    assert (report["kind"], report["event_loop"]) == ("sync", "none")
    # Sync jobs run at most as many at once as there are threads.
    assert report["ceiling_per_s"] == pytest.approx(1 * 2 / 0.010)
    assert_measured(report, processes=1)


@pytest.mark.slow
def test_bench_io_one_at_a_time() -> None:
    report = bench_io("--jobs", "20", "-c", "1", "-t", "1", "--sleep-ms", "1")
    assert report["event_loop"] == "asyncio"
    assert report["ceiling_per_s"] == pytest.approx(1000.0)
    assert_measured(report, processes=1)


async def fail_always(seconds: float) -> None:
    raise ValueError("I/O that fails")


@pytest.mark.slow
def test_failed_jobs_fail_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(io, "sleep_async", fail_always)
    with pytest.raises(BenchError, match=r"of 30 jobs, 30 failed; .*ValueError: I/O that fails"):
        run_io_benchmark(None, jobs=30, concurrency=1, tasks_per_process=10)
    assert multiprocessing.active_children() == []


# Where `die_once` leaves its mark; set before the pool forks, so its children see it.
_died: Path | None = None


async def die_once(seconds: float) -> None:
    """The first job to run kills its worker process while others run beside it (so the
    death is charged to none of them); they, and it, then pass."""
    assert _died is not None
    try:
        _died.touch(exist_ok=False)
    except FileExistsError:
        await asyncio.sleep(seconds)
        return
    await asyncio.sleep(seconds / 5)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_a_replaced_worker_process_fails_the_benchmark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Its CPU time went with it: a figure per job would be too low.
    monkeypatch.setattr(io, "sleep_async", die_once)
    monkeypatch.setattr(sys.modules[__name__], "_died", tmp_path / "died")
    with pytest.raises(BenchError, match="worker processes were replaced during the run"):
        run_io_benchmark(None, jobs=10, sleep_ms=500, concurrency=1, tasks_per_process=5)
    assert (tmp_path / "died").exists()
    assert multiprocessing.active_children() == []


def test_without_lookup_jobs_are_checked_by_how_their_runs_ended(sqs_fresh_url: str) -> None:
    # SQS cannot look jobs up: the pool's own account of each run is what is checked.
    outcomes = io.Outcomes()
    for outcome in ("completed", "failed", "completed", "stopped"):
        outcomes.job_finished("q", "t", outcome, 0.01)
    engine = open_engine(sqs_fresh_url)
    try:
        with pytest.raises(BenchError, match="of 3 jobs, 2 completed, 1 failed, 1 stopped"):
            io.verify_drained(engine, ["a", "b", "c"], outcomes)
        outcomes.counts = Counter(completed=4)  # one twice: at-least-once delivery
        io.verify_drained(engine, ["a", "b", "c"], outcomes)
    finally:
        engine.close()


@pytest.mark.slow
def test_bench_io_on_sqs(sqs_fresh_url: str) -> None:
    report = bench_io("--url", sqs_fresh_url, "--jobs", "20", "-c", "1", "-t", "10")
    assert report["url"] == sqs_fresh_url
    assert report["synchronous"] is None
    assert_measured(report, processes=1)

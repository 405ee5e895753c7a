"""Tests of `lanner bench`: the percentile helpers, the child processes, a smoke run."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace

import pytest
from click.testing import CliRunner

from lanner import Job, list_jobs, open_engine
from lanner.cli import main
from lanner.tools.bench.children import ChildGroup
from lanner.tools.bench.common import BenchError, MachineInfo
from lanner.tools.bench.engine import EngineBenchResult, drain_worker, run_engine_benchmark
from lanner.tools.bench.engine_cli import results_table
from lanner.tools.bench.pickup import PICKUP_TIMEOUT
from lanner.tools.bench.stats import Percentiles, percentile


def test_percentile_interpolates_between_ranks() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 95) == pytest.approx(95.05)
    assert percentile([3.0], 99) == 3.0


def test_percentile_does_not_depend_on_order() -> None:
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0


@pytest.mark.parametrize("q", [-1.0, 100.5, math.nan])
def test_percentile_rejects_bad_rank(q: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], q)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_percentiles_scale() -> None:
    summary = Percentiles.of([0.001, 0.002, 0.004], scale=1000.0)
    assert summary.p50 == pytest.approx(2.0)
    assert summary.max == pytest.approx(4.0)
    assert summary.count == 3
    assert set(summary.as_dict()) == {"p50", "p95", "p99", "max"}


@pytest.mark.parametrize(("jobs", "batch", "samples"), [(0, 1, 1), (1, 0, 1), (1, 1, 0)])
def test_benchmark_rejects_empty_sizes(jobs: int, batch: int, samples: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_engine_benchmark(None, jobs, batch, samples)


@pytest.mark.slow
def test_child_failure_is_reported_with_its_traceback() -> None:
    with ChildGroup() as group:
        group.spawn(drain_worker, "nope://store", "q", "w", 1, None)
        with pytest.raises(BenchError, match="unknown broker URL scheme"):
            group.wait_ready()


@pytest.mark.slow
def test_bench_engine_json_smoke() -> None:
    result = CliRunner().invoke(
        main,
        ["bench", "engine", "--jobs", "200", "--batch", "20", "--samples", "5", "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["jobs"] == 200
    assert report["batch"] == 20
    assert report["samples"] == 5
    assert report["url"].startswith("sqlite:///")
    assert report["synchronous"] == "full"
    for key in ("put_single_per_s", "put_batch_per_s", "drain_1proc_per_s", "drain_2proc_per_s"):
        assert isinstance(report[key], float)
        assert report[key] > 0, key
    assert set(report["pickup_ms"]) == {"p50", "p95", "p99", "max"}
    for name, ms in report["pickup_ms"].items():
        assert ms > 0, name
    assert report["pickup_ms"]["max"] >= report["pickup_ms"]["p50"]
    assert report["pickup_floor_ms"] is None  # SQLite has no Redis hop to measure
    assert set(report["machine"]) == {"platform", "cpu_count", "python", "sqlite", "lanner"}
    assert report["machine"]["cpu_count"] >= 1


@pytest.mark.slow
def test_bench_engine_on_redis_also_measures_the_pickup_floor(redis_url: str) -> None:
    result = run_engine_benchmark(redis_url, jobs=50, batch=10, samples=5)
    assert result.url == redis_url
    assert result.synchronous is None
    floor = result.pickup_floor_ms
    assert floor is not None
    assert floor.count == 5
    assert 0 < floor.p50 <= floor.max < 1000 * PICKUP_TIMEOUT
    assert result.to_json()["pickup_floor_ms"] == floor.as_dict()


@pytest.mark.slow
def test_bench_engine_can_drain_jobs_that_keep_a_result(redis_url: str) -> None:
    result = run_engine_benchmark(redis_url, jobs=30, batch=10, samples=2, result_bytes=64)
    assert result.to_json()["result_bytes"] == 64
    with open_engine(redis_url) as engine:
        completed = list_jobs(engine, "complete", limit=100)
    kept = [job.result for job in completed if isinstance(job, Job) and job.result is not None]
    assert len(kept) == 2 * 30  # both drain phases; the pickup's jobs keep none
    assert {len(text) for text in kept} == {64}


def test_results_table_shows_the_floor_only_when_measured() -> None:
    machine = MachineInfo.current()
    latency = Percentiles.of([0.001, 0.002], scale=1000.0)
    result = EngineBenchResult(
        "sqlite:///x", "full", 1, 1, 2, 0, 1.0, 1.0, 1.0, 1.0, latency, None, machine
    )
    labels = list(results_table(result).columns[0].cells)
    assert not any("floor" in str(label) for label in labels)
    labels = list(results_table(replace(result, pickup_floor_ms=latency)).columns[0].cells)
    assert [str(label) for label in labels if "floor" in str(label)] == [
        "pickup floor p50 (bare LPUSH to BLPOP)",
        "pickup floor p99 (bare LPUSH to BLPOP)",
    ]


@pytest.mark.slow
def test_bench_engine_counts_requests_per_job_on_sqs(sqs_fresh_url: str) -> None:
    result = run_engine_benchmark(sqs_fresh_url, jobs=20, batch=10, samples=2)
    spent = result.requests_per_job
    assert spent is not None
    assert spent["put"] >= 1.0  # one SendMessageBatch per put
    assert 0.1 <= spent["put_many"] < 0.5  # one per 10 jobs, and the queue's first look
    assert 0.2 <= spent["drain_2"] < 1.0  # a receive and a delete per 10 jobs
    assert spent["steady"] == pytest.approx(spent["put_many"] + spent["drain_2"])
    labels = [str(label) for label in results_table(result).columns[0].cells]
    assert "requests per job: put_many + pop + complete_many (steady load)" in labels


def test_sqlite_reports_no_requests_per_job() -> None:
    result = run_engine_benchmark(None, jobs=10, batch=5, samples=2)
    assert result.requests_per_job is None
    assert result.to_json()["requests_per_job"] is None


@pytest.mark.slow
def test_bench_kestrel_json_smoke() -> None:
    result = CliRunner().invoke(
        main, ["bench", "kestrel", "-n", "1", "-n", "30", "--pairs", "60", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["rounds"], report["processes"], report["value_bytes"]) == (1, 1, 100)
    rows = report["rows"]
    assert [(row["connections"], row["pairs"]) for row in rows] == [(1, 60), (30, 150)]
    assert all(row["lanner_per_s"] > 0 for row in rows)
    assert all(row["lanner_cpu_us"] > 0 for row in rows)  # its CPU per pair, from /proc
    assert report["peak_per_s"] == max(row["lanner_per_s"] for row in rows)
    assert report["blocking_consumer_per_s"] > 0
    assert report["engine_batched_per_s"] > 0
    assert report["engine_batched_cpu_us"] > 0
    assert all(report["lone"][key] > 0 for key in ("set_ms", "get_ms", "engine_put_ms"))
    for row in rows:
        if shutil.which("memcached"):
            assert row["memcached_per_s"] > 0
            assert row["ratio"] == row["lanner_per_s"] / row["memcached_per_s"]
        else:
            assert row["memcached_per_s"] is None


def test_bench_web_counts_engine_commands_per_page() -> None:
    result = CliRunner().invoke(main, ["bench", "web", "--jobs", "300", "--samples", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    pages = {page["path"]: page for page in report["pages"]}
    assert report["jobs"] == 300
    assert pages["/"]["engine_calls"] == 4 + 3  # queues, config, failures, workers + 3 stats
    assert pages["/queues/alpha"]["engine_calls"] == 3 + 14  # counts, listing, jobs + 14 days
    assert pages["/failures"]["engine_calls"] == 1
    assert all(page["median_ms"] > 0 for page in report["pages"])


def test_bench_depth_json_smoke() -> None:
    result = CliRunner().invoke(
        main, ["bench", "depth", "--depths", "10,30", "--queues", "2", "--samples", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [point["depth"] for point in document["points"]] == [10, 30]
    for point in document["points"]:
        assert point["fill_jobs_per_s"] > 0
        assert point["pop_complete_ms"]["p50"] > 0
        assert point["bytes_per_job"] > 0


def test_bench_depth_refuses_depths_out_of_order() -> None:
    result = CliRunner().invoke(main, ["bench", "depth", "--depths", "30,10"])
    assert result.exit_code == 1
    assert "ascending" in result.output

"""`lanner.metrics.pool`: a pool's metrics, and their server that steps aside for forks."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lanner.metrics.pool import MetricsServer, PoolMetrics


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metrics_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "lanner-metrics"]


@pytest.fixture
def metrics() -> Iterator[PoolMetrics]:
    made = PoolMetrics()
    made.serve("127.0.0.1", 0)
    yield made
    made.close()


def test_what_the_pool_says_is_counted(metrics: PoolMetrics) -> None:
    metrics.job_finished("emails", "app.Send", "completed", 0.2)
    metrics.job_finished("emails", "app.Send", "completed", 3.0)
    metrics.job_finished("emails", "app.Send", "failed", 0.01)
    metrics.job_finished("emails", "app.Send", "stopped", 9.0)  # not a run time
    metrics.children(3)
    metrics.recycled("max-tasks")
    metrics.hard_killed()
    metrics.engine_error("supervisor")
    metrics.engine_error("worker")
    metrics.engine_error("worker")
    assert metrics.server is not None
    found = scrape(metrics.server.port)
    jobs = (("outcome", "completed"), ("queue", "emails"), ("task", "app.Send"))
    assert found["lanner_jobs_total", jobs] == 2
    assert found["lanner_jobs_total", (("outcome", "failed"), *jobs[1:])] == 1
    assert found["lanner_jobs_total", (("outcome", "stopped"), *jobs[1:])] == 1
    assert found["lanner_job_run_seconds_count", (("queue", "emails"),)] == 3
    assert found["lanner_job_run_seconds_bucket", (("le", "0.25"), ("queue", "emails"))] == 2
    assert found["lanner_job_run_seconds_sum", (("queue", "emails"),)] == pytest.approx(3.21)
    assert found["lanner_worker_children", ()] == 3
    assert found["lanner_worker_recycles_total", (("reason", "max-tasks"),)] == 1
    assert found["lanner_worker_hard_kills_total", ()] == 1
    assert found["lanner_engine_errors_total", (("process", "supervisor"),)] == 1
    assert found["lanner_engine_errors_total", (("process", "worker"),)] == 2


def test_nothing_of_the_server_is_left_while_forking(metrics: PoolMetrics) -> None:
    server = metrics.server
    assert server is not None
    port = server.port
    assert port > 0
    assert metrics_threads() == ["lanner-metrics"]
    assert metrics.ready_to_fork()
    assert metrics_threads() == []
    assert not server.serving
    with pytest.raises(urllib.error.URLError):
        scrape(port)  # the socket is closed too
    metrics.forked()
    assert metrics_threads() == ["lanner-metrics"]
    assert scrape(port)["lanner_worker_children", ()] == 0  # the same port again


def test_a_closed_server_stays_closed(metrics: PoolMetrics) -> None:
    metrics.close()
    metrics.forked()
    assert metrics_threads() == []


def test_a_port_in_use_fails_at_serve() -> None:
    first = MetricsServer(PoolMetrics().registry, "127.0.0.1", 0)
    first.start()
    try:
        with pytest.raises(OSError):
            PoolMetrics().serve("127.0.0.1", first.port)
    finally:
        first.close()


def test_a_pool_without_a_server_is_always_ready_to_fork() -> None:
    metrics = PoolMetrics()
    assert metrics.ready_to_fork()
    metrics.forked()
    metrics.close()

"""`lanner worker --metrics-port`: a real pool's metrics, scraped over HTTP while it works,
recycles its children and kills a stuck one; the server never alive across a fork."""

from __future__ import annotations

import re
import signal
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from lanner.metrics.pool import PoolMetrics
from lanner.worker.pool import WorkerPool

from .conftest import Workspace, wait_until
from .pool_support import supervising

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

TASKS = """
class Work(Task):
    app = app
    queue = "work"
    time_limit = 4
    max_retries = 0

    def run_task(self):
        record("end", self.task_id)


class Boom(Task):
    app = app
    queue = "work"
    time_limit = 4
    max_retries = 0

    def run_task(self):
        record("end", self.task_id)
        raise ValueError("boom")


class Flaky(Task):
    app = app
    queue = "work"
    time_limit = 4
    max_retries = 1

    def run_task(self):
        record("end", self.task_id)
        raise ValueError("again")


class Stuck(Task):
    app = app
    queue = "work"
    time_limit = 0.3
    max_retries = 0

    def run_task(self):
        record("start", self.task_id)
        while True:
            try:
                time.sleep(10)
            except TimeLimitExceeded:
                pass
"""


def scrape(port: int) -> Samples | None:
    """Every sample, by name and sorted labels; None if the server does not answer now."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except urllib.error.URLError:
        return None
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@contextmanager
def observed_pool(
    ws: Workspace, forks: list[list[str]], **options: Any
) -> Iterator[tuple[WorkerPool, int]]:
    """A pool with its metrics served on a free port; `forks` gets the threads alive at
    each fork."""
    tasks = ws.write_module(TASKS)
    metrics = PoolMetrics()
    server = metrics.serve("127.0.0.1", 0)
    pool = WorkerPool(tasks.app, observer=metrics, **options)
    spawn = pool._spawn

    def spawn_seen() -> None:
        forks.append(sorted(t.name for t in threading.enumerate()))
        spawn()

    pool._spawn = spawn_seen  # type: ignore[method-assign]
    pool.start()
    try:
        yield pool, server.port
    finally:
        pool.terminate(timeout=5)
    assert not server.serving  # the pool closed it


def value(samples: Samples | None, name: str, **labels: str) -> float | None:
    return None if samples is None else samples.get((name, tuple(sorted(labels.items()))))


def test_jobs_children_and_recycles_are_counted(workspace: Workspace) -> None:
    ws = workspace
    forks: list[list[str]] = []
    with observed_pool(ws, forks, concurrency=2, max_tasks_per_child=3) as (pool, port):
        tasks = ws.write_module(TASKS)
        work = [tasks.Work.publish(None) for _ in range(6)]
        boom = tasks.Boom.publish(None)
        flaky = tasks.Flaky.publish(None)
        klass = {name: ws.job(jid).klass for name, jid in (("work", work[0]), ("boom", boom),
                                                            ("flaky", flaky))}  # fmt: skip

        def counted() -> Samples | None:
            found = scrape(port)
            jobs = value(found, "lanner_job_run_seconds_count", queue="work")
            children = value(found, "lanner_worker_children")
            return found if jobs == 9 and children == 2 else None  # 6 + 1 + 2 runs of flaky

        found = wait_until(counted, 20, "every run to be counted", step=supervising(pool))
        pids = {line.pid for line in ws.lines("end")}

    def jobs(task: str, outcome: str) -> float | None:
        return value(found, "lanner_jobs_total", queue="work", task=klass[task], outcome=outcome)

    assert jobs("work", "completed") == 6
    assert jobs("boom", "failed") == 1
    assert jobs("flaky", "retried") == 1
    assert jobs("flaky", "failed") == 1
    assert value(found, "lanner_worker_children") == 2
    recycled = value(found, "lanner_worker_recycles_total", reason="max-tasks")
    assert recycled is not None
    assert recycled >= 1
    assert len(pids) > 2  # children forked after the server started ran jobs too
    assert len(forks) >= 3
    assert all("lanner-metrics" not in threads for threads in forks), forks
    assert value(found, "lanner_worker_hard_kills_total") == 0
    assert value(found, "lanner_engine_errors_total", process="worker") is None


def test_a_hard_kill_is_counted_and_its_child_replaced(workspace: Workspace) -> None:
    ws = workspace
    forks: list[list[str]] = []
    with observed_pool(ws, forks, concurrency=1) as (pool, port):
        tasks = ws.write_module(TASKS)
        tasks.Stuck.publish(None)
        after = tasks.Work.publish(None)

        def replaced() -> Samples | None:
            found = scrape(port)
            done = value(found, "lanner_job_run_seconds_count", queue="work")
            return found if done == 1 and ws.lines("end", after) else None

        found = wait_until(replaced, 20, "the kill and the next job", step=supervising(pool))

    assert value(found, "lanner_worker_hard_kills_total") == 1
    assert value(found, "lanner_worker_children") == 1
    assert len(forks) == 2
    assert all("lanner-metrics" not in threads for threads in forks), forks


def test_lanner_worker_serves_its_metrics(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(TASKS)
    jids = [tasks.Work.publish(None) for _ in range(3)]
    worker = ws.start_worker("--broker", ws.url, "-A", ws.module_name, "-Q", "work", "-c", "1",
                             "--metrics-port", "0", "--shutdown-timeout", "3")  # fmt: skip
    try:
        shown = wait_until(
            lambda: re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", ws.log()),
            20,
            "the metrics address in the log",
            details=ws.log,
        )
        port = int(shown.group(1))
        klass = ws.job(jids[0]).klass

        def completed() -> float | None:
            found = scrape(port)
            done = value(found, "lanner_jobs_total", queue="work", task=klass, outcome="completed")
            return done if done == 3 else None

        wait_until(completed, 20, "three jobs counted", details=ws.log)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=10)
    assert code == 0, ws.log()


def test_a_metrics_port_in_use_is_a_one_line_error(workspace: Workspace) -> None:
    from lanner.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main, ["worker", "--broker", workspace.url, "--metrics-port", str(port)]
        )
    assert result.exit_code == 1
    assert f"Error: cannot serve metrics on 127.0.0.1:{port}:" in result.output
    assert "Traceback" not in result.output

"""Kale's example, run as a Kale user runs it: `kale_example/` (tasks, settings, queue config,
worker and publisher scripts, differing from a Kale user's in their import lines only) with
KALE_SETTINGS_MODULE set, real processes, on each engine.

The publisher script publishes Fibonacci tasks (one of them fails its first run, and its
own `_get_delay_sec_for_retry` retries it at once); `worker.py` runs `Worker().run()` until
SIGTERM, which it must survive cleanly. An engine joins by adding its name to `ENGINES`
and a way to make a fresh store of it to `_store_url`. On an engine that cannot look a job
up (SQS), the jobs' ends are read from the worker's output and the queues' counts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lanner
from lanner import Capability, JobState

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "kale_example"
ENGINES = ["sqlite", "redis", "sqs"]
DEADLINE_SEC = 30.0


def _store_url(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 'kale.db'}"
    if engine == "redis":
        import redis

        url: str = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url
    if engine == "sqs":
        return str(request.getfixturevalue("sqs_fresh_url"))
    raise AssertionError(f"no store for engine {engine!r}")


@pytest.fixture(params=ENGINES)
def example(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the example folder (the working directory of its scripts) and a store."""
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder, _store_url(request.param, request, tmp_path)


def _environment(url: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("LANNER_", "KALE_"))
    }
    env.update(KALE_SETTINGS_MODULE="taskworker.settings", LANNER_BROKER=url,
               PYTHONDONTWRITEBYTECODE="1")  # fmt: skip
    return env


def _publish(folder: Path, url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "publisher.py", *args],
        cwd=folder,
        env=_environment(url),
        capture_output=True,
        text=True,
        timeout=DEADLINE_SEC,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().rsplit(": ", 1)[-1]  # the printed task id


def _wait_for(condition: str, check: object, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE_SEC
    while not (check() if callable(check) else check):
        assert worker.poll() is None, f"the worker exited ({worker.returncode}) before {condition}"
        assert time.monotonic() < deadline, f"not within {DEADLINE_SEC:g} s: {condition}"
        time.sleep(0.05)


def test_kales_example_publishes_and_runs_fibonacci_tasks(example: tuple[Path, str]) -> None:
    folder, url = example
    published = {n: _publish(folder, url, str(n)) for n in (7, 10)}
    flaky = _publish(folder, url, "12", "--flaky")
    output = folder / "worker.out"
    with output.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "worker.py"],
            cwd=folder,
            env=_environment(url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    engine = lanner.open_engine(url)
    try:
        jids = [*published.values(), flaky]

        def all_complete() -> bool:
            if Capability.LOOKUP in engine.capabilities:
                return all(job.state == JobState.COMPLETE for job in engine.multiget(jids))
            text = output.read_text() if output.exists() else ""
            ran = all(f"fibonacci({n}) = " in text for n in (7, 10, 12))
            return ran and all(not (q.waiting or q.running) for q in engine.queues())

        _wait_for("every task completed", all_complete, worker)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_SEC) == 0
        if Capability.LOOKUP in engine.capabilities:
            flaky_job = engine.get(flaky)
            assert flaky_job is not None
            assert flaky_job.remaining == flaky_job.retries - 1  # one retry spent, at once
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        engine.close()
    lines = output.read_text().splitlines()
    assert "fibonacci(7) = 13" in lines
    assert "fibonacci(10) = 55" in lines
    assert "fibonacci(12) = 144" in lines
    assert any(f"the first run of {flaky} fails" in line for line in lines)
    # Kale's settings that lanner does not use are named once, not silently dropped.
    assert any("ignoring Kale settings" in line and "AWS_REGION" in line for line in lines)

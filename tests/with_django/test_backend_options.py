"""The backend's settings: OPTIONS it refuses, the flags it sets on SQS, and the queue names
`manage.py check` reports. No pool: only how the backend is made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lanner.errors import ConfigError

from .conftest import PROJECT


def backend(options: dict[str, Any], queues: list[str] | None = None) -> Any:
    from lanner.contrib.django.backend import LannerBackend

    params: dict[str, Any] = {"BACKEND": "lanner.contrib.django.LannerBackend"}
    params["OPTIONS"] = options
    if queues is not None:
        params["QUEUES"] = queues
    return LannerBackend("default", params)


def test_unknown_options_are_refused(django_db: Path) -> None:
    from lanner.contrib.django.compat import InvalidTaskBackend

    with pytest.raises(InvalidTaskBackend, match="unknown OPTIONS colour"):
        backend({"broker": f"sqlite:///{django_db}?shared=1", "colour": "red"})


def test_sqs_keeps_no_results_and_no_priorities(django_db: Path) -> None:
    on_sqs = backend({"broker": "sqs://lanner-test?region=us-east-1"})
    assert on_sqs.supports_defer
    assert on_sqs.supports_async_task
    assert not on_sqs.supports_get_result
    assert not on_sqs.supports_priority
    with pytest.raises(NotImplementedError, match="SQS"):
        on_sqs.get_result("0123456789abcdef")
    on_redis = backend({"broker": "redis://127.0.0.1:1/0", "retries": 2, "time_limit": 30})
    assert on_redis.supports_get_result
    assert on_redis.supports_priority
    assert (on_redis.retries, on_redis.time_limit) == (2, 30.0)


def test_check_reports_queue_names_lanner_refuses(django_db: Path) -> None:
    checked = backend({"broker": "redis://127.0.0.1:1/0"}, ["default", "no spaces"])
    errors = checked.check()
    assert len(errors) == 1
    assert "no spaces" in errors[0].msg
    with pytest.raises(ConfigError, match="no spaces"):  # manage.py lanner_worker says so
        checked.served_queues()


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "lanner_worker", *args],
        cwd=PROJECT,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_takes_lanner_workers_options(django_db: Path) -> None:
    shown = run_command("--help")
    assert shown.returncode == 0, shown.stderr
    for option in ("--backend", "--concurrency", "--queues-list", "--tasks-per-process",
                   "--max-tasks-per-child", "--shutdown-timeout", "--metrics-port"):  # fmt: skip
        assert option in shown.stdout
    unknown = run_command("--backend", "nope")
    assert unknown.returncode == 1
    assert "TASKS['nope']" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1

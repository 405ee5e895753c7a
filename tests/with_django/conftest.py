"""A real Django project (tests/django_project: SQLite database, the `shop` app) served by
a real `manage.py lanner_worker` pool, on SQLite and on Redis.

Django is set up once in the test process, on a database file of the session; the
backend's broker is chosen per module (`override_settings(TASKS=...)` here, the
environment for the worker subprocess, whose settings read it). On SQLite the broker is the
project's own database file: lanner's tables beside the application's, so that an enqueue
inside `transaction.atomic()` joins the transaction. Django is a dev dependency: under
CI=true a missing Django fails these tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parent.parent / "django_project"
DEADLINE = 60.0  # generous: the machine is shared


def _need_django() -> None:
    try:
        import django  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("Django is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="session")
def django_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's database file, migrated; Django set up in this process."""
    _need_django()
    import django
    from django.core.management import call_command

    db = tmp_path_factory.mktemp("django") / "db.sqlite3"
    os.environ["LANNER_DJANGO_DB"] = str(db)
    os.environ["LANNER_DJANGO_BROKER"] = f"sqlite:///{db}?shared=1"
    os.environ["LANNER_DJANGO_LOG"] = str(db.parent / "tasks.log")
    os.environ["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    sys.path.insert(0, str(PROJECT))
    django.setup()
    call_command("migrate", verbosity=0)
    return db


class Project:
    """The project as a test uses it: its broker, its worker subprocesses, its files."""

    def __init__(self, db: Path, broker: str, outbox: bool, logs: Path) -> None:
        self.db = db
        self.broker = broker
        self.outbox = outbox
        self.logs = logs
        self.task_log = Path(os.environ["LANNER_DJANGO_LOG"])
        self._workers: list[subprocess.Popen[bytes]] = []

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "LANNER_DJANGO_BROKER": self.broker,
            "LANNER_DJANGO_OUTBOX": "1" if self.outbox else "",
            "LANNER_SETTINGS_MODULE": "djproject.lanner_settings",  # quick retries
            "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")]),
        }

    def start_worker(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"worker-{len(self._workers)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "manage.py", "lanner_worker", "--log-level", "WARNING", *args],
            cwd=PROJECT,
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self._workers.append(process)
        return process

    def stop_worker(self, process: subprocess.Popen[bytes]) -> int:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait()

    def stop_all(self) -> None:
        for process in self._workers:
            self.stop_worker(process)

    def worker_log(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs.glob("*.log"))


def wait_for(what: Callable[[], Any], description: str, deadline: float = DEADLINE) -> Any:
    """Poll `what` until it returns something true; fail after `deadline` seconds."""
    end = time.monotonic() + deadline
    while True:
        found = what()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {description}")
        time.sleep(0.05)


def tasks_setting(broker: str, outbox: bool) -> dict[str, Any]:
    """The project's TASKS (djproject/settings.py) on `broker`."""
    return {
        "default": {
            "BACKEND": "lanner.contrib.django.LannerBackend",
            "QUEUES": ["default", "ordered", "emails"],
            "OPTIONS": {"broker": broker, "outbox": outbox},
        },
        "retrying": {
            "BACKEND": "lanner.contrib.django.LannerBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"broker": broker, "retries": 2},
        },
    }


def broker_url(kind: str, db: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{db}?shared=1"
    url = str(request.getfixturevalue("redis_url"))
    url = url.rsplit("/", 1)[0] + "/7"  # a database of the server that no other test uses
    import redis

    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def project(
    request: pytest.FixtureRequest, django_db: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    """The project on one broker, with a pool serving `default` and `emails` (not `ordered`,
    which a test drains with a worker of its own)."""
    from django.test.utils import override_settings

    outbox = getattr(request.module, "OUTBOX", False)
    broker = broker_url(request.param, django_db, request)
    project = Project(django_db, broker, outbox, tmp_path_factory.mktemp("workers"))
    with override_settings(TASKS=tasks_setting(broker, outbox)):
        project.start_worker("-c", "2", "-Q", "default,emails")
        try:
            yield project
        finally:
            project.stop_all()

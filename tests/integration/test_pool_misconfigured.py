"""A store that refuses the pool's configuration (a wrong password, a file that is not
lanner's, credentials SQS denies) stops `lanner worker` with one line and status 1, since
waiting cannot fix it; a store that is away is still waited out (test_pool_faults.py)."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest

from lanner import App, QueueConfig, Settings, StoreMisconfigured
from lanner.selectors import resolve_selector
from lanner.worker.loop import WorkerLoop
from lanner.worker.pool import WorkerPool

from .conftest import Workspace, wait_until

EXIT_WITHIN = 30.0
"""Generous for a busy machine: the pool exits in about a second; before, it never did."""


class RedisServer(Protocol):
    """What tests/conftest.py's `redis_server_factory` gives: a private server."""

    @property
    def port(self) -> int: ...


def refused(ws: Workspace, url: str) -> str:
    """Run `lanner worker` on `url` until it exits; its last line, once it exited with 1."""
    process = ws.start_worker("--broker", url, "--concurrency", "2", "--shutdown-timeout", "5")
    try:
        code = process.wait(timeout=EXIT_WITHIN)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still waiting after {EXIT_WITHIN:g} s:\n{ws.log()}") from None
    assert code == 1, ws.log()
    last = ws.log().strip().splitlines()[-1]
    assert last.startswith("Error: "), ws.log()
    return last


@pytest.mark.parametrize(
    ("credentials", "said"),
    [("", "asks for a password"), (":wrong-one@", "refused the broker URL's user or password")],
    ids=["no-password", "wrong-password"],
)
def test_a_refused_redis_password_stops_the_pool(
    workspace: Workspace,
    redis_server_factory: Callable[..., RedisServer],
    credentials: str,
    said: str,
) -> None:
    server = redis_server_factory("--requirepass", "s3cret")
    last = refused(workspace, f"redis://{credentials}127.0.0.1:{server.port}/0")
    assert said in last
    assert f"redis://127.0.0.1:{server.port}/0" in last
    assert "wrong-one" not in workspace.log()  # a password is never shown


def test_a_file_that_is_not_a_database_stops_the_pool(workspace: Workspace) -> None:
    workspace.db.write_text("[database]\nhost = db.example\n")
    last = refused(workspace, workspace.url)
    assert f"{workspace.db} is not an SQLite database" in last
    assert workspace.db.read_text() == "[database]\nhost = db.example\n"


def test_a_database_of_another_application_stops_the_pool(workspace: Workspace) -> None:
    with sqlite3.connect(workspace.db) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    conn.close()
    last = refused(workspace, workspace.url)
    assert f"{workspace.db} is an SQLite database that lanner did not create" in last


def test_credentials_sqs_denies_stop_the_pool(workspace: Workspace, sqs_denying_url: str) -> None:
    last = refused(workspace, sqs_denying_url)
    assert "InvalidClientTokenId" in last


def test_a_store_that_turns_into_another_file_under_running_workers_stops_the_pool(
    tmp_path: Path,
) -> None:
    """The refusal reaches a worker process, not the supervisor: it tells the supervisor,
    which stops every process and raises it from `run`."""
    db = tmp_path / "jobs.db"
    url = f"sqlite:///{db}"
    app = App(url, settings=Settings(broker=url), queues=[QueueConfig("work")])
    pool = WorkerPool(app, concurrency=2, shutdown_timeout=5)
    pool.start()
    try:
        wait_until(
            lambda: len(app.engine.workers()) == 2,  # each has popped: its file is open
            EXIT_WITHIN,
            "both workers to pop",
            step=lambda: pool.supervise(0.05),
        )
        garbage = tmp_path / "garbage"
        garbage.write_bytes(b"not a database at all\n" * 100)
        garbage.replace(db)
        started = time.monotonic()
        wait_until(
            lambda: pool.refused is not None and not pool.children,
            EXIT_WITHIN,
            "the pool to stop",
            step=lambda: pool.supervise(0.05),
        )
        assert isinstance(pool.refused, StoreMisconfigured)
        assert "is not an SQLite database" in str(pool.refused)
        assert time.monotonic() - started < EXIT_WITHIN
    finally:
        pool.terminate(timeout=5)
        app.close()


def test_a_queue_cap_the_engine_cannot_keep_stops_the_pool(sqs_fresh_url: str) -> None:
    """SQS cannot cap a queue's running jobs: a queue meant to be capped does not run
    uncapped (as bounds on such an engine, refused before any child starts)."""
    queues = [QueueConfig("work", max_concurrency=2)]
    app = App(sqs_fresh_url, settings=Settings(broker=sqs_fresh_url), queues=queues)
    pool = WorkerPool(app, concurrency=1, shutdown_timeout=5)
    try:
        pool.start()
        assert isinstance(pool.refused, StoreMisconfigured)
        assert "cannot cap how many jobs of a queue run at once" in str(pool.refused)
        assert "max_concurrency" in str(pool.refused)
        assert pool.children == []
    finally:
        pool.stop()
        app.close()


def test_a_queue_cap_the_engine_cannot_keep_stops_a_lone_worker(sqs_fresh_url: str) -> None:
    """A worker loop without a pool refuses the cap too, rather than retry it as an outage."""
    queues = [QueueConfig("work", max_concurrency=2)]
    app = App(sqs_fresh_url, settings=Settings(broker=sqs_fresh_url), queues=queues)
    try:
        loop = WorkerLoop(app, queues, resolve_selector("lottery"), worker="w1")
        with pytest.raises(StoreMisconfigured, match="max_concurrency"):
            loop.run()
    finally:
        app.close()

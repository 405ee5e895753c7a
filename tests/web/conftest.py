"""The dashboard over real engines: a SQLite file, the session's Redis server, SQS on moto.

`client` is Starlette's TestClient (HTTP in this process, the app's lifespan run, so the
live-update thread too); `served` is the dashboard on a real port (`WebThread`), for the
browser tests and the live stream. `populate` puts the jobs every page test looks at.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import lanner
from lanner import Capability, Engine
from lanner.web import WebThread, create_app

TOKEN = "s3cret-token"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tasks.py", line 7, in send\n'
    "    raise ValueError('no such address: nobody@example.com')\n"
    "ValueError: no such address: nobody@example.com"
)


def _redis(request: pytest.FixtureRequest, tmp: Path) -> str:
    import redis

    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


STORES: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "sqlite": lambda request, tmp: "sqlite:///" + str(tmp / "lanner.db"),
    "redis": _redis,
    "sqs": lambda request, tmp: str(request.getfixturevalue("sqs_fresh_url")),
}


@pytest.fixture(params=sorted(STORES))
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    opened = lanner.open_engine(STORES[request.param](request, tmp_path))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    opened = lanner.open_engine("sqlite:///" + str(tmp_path / "lanner.db"))
    try:
        yield opened
    finally:
        opened.close()


def populate(engine: Engine) -> dict[str, str]:
    """Jobs in every state the engine can hold; returns their jids by what they show."""
    rich = Capability.LOOKUP in engine.capabilities
    tags = ["welcome"] if Capability.TAGS in engine.capabilities else None
    jids = {
        "done": engine.put("emails", "job-done", "tasks.send", '{"to": "a@example.com"}',
                           tags=tags),
        "failed": engine.put("emails", "job-failed", "tasks.send",
                             '{"to": "nobody@example.com"}', tags=tags),
        "waiting": engine.put("reports", "job-waiting", "tasks.report", '{"month": 11}'),
    }  # fmt: skip
    popped = {job.jid: job for job in engine.pop("emails", "worker-1", 2, wait=5)}
    assert len(popped) == 2
    done, failed = (popped.get(jids["done"]), popped.get(jids["failed"])) if rich else (
        list(popped.values())
    )  # fmt: skip
    assert done is not None
    assert failed is not None
    if Capability.RESULTS in engine.capabilities:
        engine.complete(done.jid, "worker-1", "emails", result='{"sent": true}')
    else:
        engine.complete(done.jid, "worker-1", "emails")
    engine.fail(failed.jid, "worker-1", "tasks.send-ValueError", TRACEBACK)
    return jids


def client_for(engine: Engine, token: str | None = None) -> TestClient:
    return TestClient(create_app(engine, token=token), base_url="http://127.0.0.1")


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with client_for(engine, TOKEN) as opened:
        yield opened


@pytest.fixture
def signed_in(client: TestClient) -> TestClient:
    response = client.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    assert response.status_code == 303
    return client


def until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.fixture
def served(sqlite_engine: Engine) -> Iterator[WebThread]:
    with WebThread(sqlite_engine, token=TOKEN) as web:
        yield web

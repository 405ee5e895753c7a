"""Debounce: one waiting run per key for a window, keeping the latest or the first publish,
on SQLite and Redis (the engines' `if_exists` modes do the keeping, atomically)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanner import Debounce, JobState, NewJob
from lanner.app import App
from lanner.settings import Settings


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/jobs.db"
    elif request.param == "redis-cluster":
        cluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        url = cluster.url
    else:
        import redis

        url = str(request.getfixturevalue("redis_url"))
        with redis.Redis.from_url(url) as client:
            client.flushdb()
    made = App(url, settings=Settings(broker=url))
    yield made
    made.close()


def args_of(app: App, jid: str) -> list[object]:
    job = app.engine.get(jid)
    assert job is not None
    return list(json.loads(job.data)["args"])


def due_of(app: App, jid: str) -> float:
    job = app.engine.get(jid)
    assert job is not None
    assert job.due is not None
    return job.due


def test_keep_latest_replaces_the_waiting_run_and_restarts_its_wait(app: App) -> None:
    @app.task(queue="q", debounce=Debounce(30, key=lambda doc, **_: doc))
    def reindex(doc: str, version: int) -> None: ...

    first = reindex.delay("a", 1)
    second = reindex.delay("a", 2)
    other = reindex.delay("b", 1)
    assert first == second != other
    assert args_of(app, second) == ["a", 2]
    job = app.engine.get(second)
    assert job is not None
    assert job.state == JobState.SCHEDULED


def test_keep_first_drops_publishes_while_one_waits(app: App) -> None:
    @app.task(queue="q", debounce=Debounce(30, key="digest", keep="first"))
    def digest(n: int) -> None: ...

    first = digest.delay(1)
    assert digest.delay(2) == first
    assert args_of(app, first) == [1]


def test_a_publish_while_the_keys_run_runs_waits_behind_it(app: App) -> None:
    @app.task(queue="q", debounce=0.001)
    def refresh(n: int) -> None: ...

    first = refresh.delay(1)
    [running] = app.engine.pop("q", "w", 5, now=due_of(app, first) + 1)
    second = refresh.delay(2)
    assert second != first
    assert refresh.delay(3) == second  # replaces the waiting one, not the running one
    assert args_of(app, second) == [3]
    later = due_of(app, second) + 1
    assert app.engine.pop("q", "w", 5, now=later) == []  # the key's runs never overlap
    app.engine.complete(running.jid, "w", "q", now=later)
    assert [job.jid for job in app.engine.pop("q", "w", 5, now=later)] == [second]


def test_keep_waiting_is_an_engine_mode(app: App) -> None:
    engine = app.engine
    engine.put_many([NewJob("q", "j", "K", if_exists="keep-waiting", delay=5)])
    engine.put_many([NewJob("q", "j", "K", '{"n": 2}', if_exists="keep-waiting")])
    job = engine.get("j")
    assert job is not None
    assert job.data == "{}"

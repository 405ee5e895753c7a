"""Fixtures of the engine conformance suite: a fresh store per test, for every engine.

The suite is written once against `lanner.Engine` and docs/protocol.md, and runs
unchanged against each engine named in `STORES`. Adding an engine is one line there.

A test of a promise that needs a capability says so, `@pytest.mark.requires(Capability.X)`
(or `pytestmark` for a whole module), and is skipped where the engine lacks it (only
there: the other engines run it); `test_capabilities.py` proves that what is absent is
refused. A test that drives locks or delays by `now` alone is marked `driven_clock`, and
skipped on an engine whose store keeps its own clock (`Engine.follows_now` False: SQS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import lanner
from lanner import Engine
from stores import fresh_redis

# A replica's confirmation of each durable call. On a machine loaded many times over, a
# replica once took more than the default 5 s to confirm a put (the put then refused, as
# it must): the tests give it 20 s, which says nothing of how long it takes.
WAITED = "wait=1&wait_timeout=20&socket_timeout=30"


def _fresh_sentinel(request: pytest.FixtureRequest, tmp: Path) -> str:
    """The session's Sentinel setup (tests/conftest.py), its primary's database emptied."""
    setup = request.getfixturevalue("redis_sentinel")
    setup.flush()
    url: str = setup.url
    return url


def _fresh_cluster(request: pytest.FixtureRequest, tmp: Path) -> str:
    """The session's replicated Redis Cluster (tests/conftest.py), every primary emptied
    for this test; with `wait=1`, as through Sentinel, so that every durable call of the
    cluster engine goes with its WAIT to the shard that ran it."""
    from redis_cluster import RedisCluster

    cluster: RedisCluster = request.getfixturevalue("redis_cluster_replicated")
    cluster.flush()
    return cluster.url + "?" + WAITED


# Engine name -> how to make the URL of a fresh, empty store for one test (given the test's
# request, to reach a server fixture only when that engine is tested, and its tmp_path).
# Redis runs twice: with its Lua core as a function library (the default on Redis 7) and
# as a script (EVALSHA, as on Redis 6.2 and for qless's clients), and once more through
# Sentinel (a primary found by its name, with replicas), waiting for a replica's copy
# of every durable write (the `wait` option) so that what it adds runs too, and on a
# replicated Redis Cluster with `wait` as well.
STORES: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "sqlite": lambda request, tmp: "sqlite:///" + str(tmp / "lanner.db"),
    "redis": lambda request, tmp: fresh_redis(request) + "?lua=function",
    "redis-script": lambda request, tmp: fresh_redis(request) + "?lua=script",
    "redis-sentinel": lambda request, tmp: _fresh_sentinel(request, tmp) + "?" + WAITED,
    "redis-cluster": _fresh_cluster,
    "sqs": lambda request, tmp: str(request.getfixturevalue("sqs_fresh_url")),
}


@pytest.fixture(autouse=True)
def _required(request: pytest.FixtureRequest) -> None:
    """Skip a test marked `requires(...)` or `driven_clock` where the engine cannot run it."""
    needed = [c for marker in request.node.iter_markers("requires") for c in marker.args]
    clocked = request.node.get_closest_marker("driven_clock") is not None
    if not needed and not clocked:
        return
    engine: Engine = request.getfixturevalue("engine")
    missing = [c.value for c in needed if c not in engine.capabilities]
    if missing:
        pytest.skip(f"{engine.name} engine lacks {', '.join(missing)}")
    if clocked and not engine.follows_now:
        pytest.skip(f"{engine.name} engine's locks and delays run on its store's own clock")


@pytest.fixture(params=sorted(STORES))
def store_name(request: pytest.FixtureRequest) -> str:
    """The key in `STORES` of the store under test (every test runs once per store)."""
    name: str = request.param
    return name


@pytest.fixture
def engine_name(store_name: str) -> str:
    """The name of the engine under test: the store's name up to any '-' (redis-cluster
    is one engine's name)."""
    return store_name if store_name == "redis-cluster" else store_name.partition("-")[0]


@pytest.fixture
def engine_url(store_name: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh store of the engine under test."""
    return STORES[store_name](request, tmp_path)


@pytest.fixture
def engine(engine_url: str) -> Iterator[Engine]:
    """An engine opened on a fresh store, closed after the test."""
    opened = lanner.open_engine(engine_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def connect(engine_url: str) -> Iterator[Callable[[], Engine]]:
    """Open more connections to the same store (closed after the test)."""
    opened: list[Engine] = []

    def open_one() -> Engine:
        connection = lanner.open_engine(engine_url)
        opened.append(connection)
        return connection

    yield open_one
    for connection in opened:
        connection.close()

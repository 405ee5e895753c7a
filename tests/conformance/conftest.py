"""Fixtures of the engine conformance suite: a fresh store per test, for every engine.

The suite is written once against `lanner.Engine` and docs/protocol.md, and runs
unchanged against each engine named in `STORES`. Adding an engine is one line there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import lanner
from lanner import Engine

# Engine name -> how to make the URL of a fresh, empty store inside a test's tmp_path.
STORES: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: "sqlite:///" + str(tmp / "lanner.db"),
}


@pytest.fixture(params=sorted(STORES))
def engine_name(request: pytest.FixtureRequest) -> str:
    """The name of the engine under test (every test runs once per engine)."""
    name: str = request.param
    return name


@pytest.fixture
def engine_url(engine_name: str, tmp_path: Path) -> str:
    """The URL of a fresh store of the engine under test."""
    return STORES[engine_name](tmp_path)


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

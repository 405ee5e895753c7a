"""`lanner bench transactional`, scaled down: transactions publishing their job within
them, every other one rolled back, the publisher killed (SIGKILL) at random points, a real
pool running what was committed. Exactly the committed jobs run, each once: on SQLite
(the application's own database holds lanner's tables) and on Redis (through the outbox
the pool relays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lanner.tools.bench.transactional import run_transactional

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_sqlite_in_the_applications_database(tmp_path: Path) -> None:
    result = run_transactional(None, 16, kill_ms=150, seed=7, directory=str(tmp_path))
    assert result.ok, result.to_json()
    assert (result.committed, result.rolled_back, result.ran) == (8, 8, 8)


def test_redis_through_the_outbox(redis_url: str, tmp_path: Path) -> None:
    result = run_transactional(redis_url, 16, kill_ms=150, seed=8, directory=str(tmp_path))
    assert result.ok, result.to_json()
    assert (result.committed, result.rolled_back, result.ran) == (8, 8, 8)

"""Chords under kill -9: a real pool runs chords while one of its worker processes is killed
every second (`lanner bench chord-chaos`, scaled down); every callback completes once,
after all its parents, with all their results, and nothing is lost. SQLite and Redis."""

from __future__ import annotations

from pathlib import Path

import pytest

from lanner.tools.bench.chord_chaos import run_chord_chaos

pytestmark = pytest.mark.timeout(170, method="thread")


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'chords.db').as_posix()}"
    import redis

    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


def test_every_callback_runs_once_with_every_result_under_kills(store_url: str) -> None:
    report = run_chord_chaos(store_url, chords=20, parents=10, work_ms=30, deadline=150)

    assert report.kills >= 1
    assert report.problems == []
    assert report.lost == 0
    assert report.callbacks_complete == report.callbacks_done_once == 20
    assert (report.wrong, report.early, report.bad_results) == (0, 0, 0)
    assert report.repeats <= report.kills
    assert report.passed

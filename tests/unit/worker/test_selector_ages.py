"""The worker loop gives a selector that asks for them the ages of its queues' next jobs."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from lanner.app import App
from lanner.queues import QueueConfig
from lanner.selectors import Ages, Ready, SelectableQueue, resolve_selector
from lanner.settings import Settings
from lanner.worker.loop import WorkerLoop

pytestmark = pytest.mark.timeout(60, method="thread")

Q = TypeVar("Q", bound=SelectableQueue)


class AgeRecorder:
    """Picks the first queue and keeps what it was shown."""

    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []

    def select(self, queues: Sequence[Q], ready: Ready) -> Q:
        raise AssertionError("the loop should have called select_by_age")

    def select_by_age(self, queues: Sequence[Q], ready: Ready, ages: Ages) -> Q:
        self.seen.append(dict(ages()))
        return queues[0]


class NoAges:
    """A plain selector: the loop must not peek for it."""

    def select(self, queues: Sequence[Q], ready: Ready) -> Q:
        return queues[0]


QUEUES = [
    QueueConfig("high", priority=100, long_poll_time_sec=0.1),
    QueueConfig("low", priority=5, long_poll_time_sec=0.1),
    QueueConfig("idle", priority=40, long_poll_time_sec=0.1),
]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    url = "sqlite:///" + str(tmp_path / "jobs.db")
    made = App(url, settings=Settings(broker=url), queues=QUEUES)
    yield made
    made.close()


def test_the_loop_gives_the_age_of_each_queues_next_job(app: App) -> None:
    now = time.time()
    app.engine.put("high", "h1", "Some.Task", now=now - 2.0)
    app.engine.put("high", "h2", "Some.Task", now=now - 1.0)
    app.engine.put("low", "l1", "Some.Task", now=now - 30.0)
    selector = AgeRecorder()
    loop = WorkerLoop(app, QUEUES, selector, worker="w1", configure=False)
    try:
        assert loop.select().name == "high"
    finally:
        loop.close()
    (ages,) = selector.seen
    assert set(ages) == {"high", "low"}  # a queue without work is not peeked
    assert 2.0 <= ages["high"] < 2.0 + 5  # the oldest job, not the newest
    assert 30.0 <= ages["low"] < 30.0 + 5


def test_a_queue_found_empty_after_all_is_left_out(app: App) -> None:
    app.engine.put("low", "l1", "Some.Task")
    loop = WorkerLoop(app, QUEUES, AgeRecorder(), worker="w1", configure=False)
    try:
        assert loop.ready_queues() == {"low"}  # cached for a moment
        app.engine.pop("low", "w2", 1)
        assert loop.queue_ages() == {}
    finally:
        loop.close()


def test_a_plain_selector_costs_no_peek(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    app.engine.put("low", "l1", "Some.Task")

    def no_peek(*args: object, **kwargs: object) -> None:
        raise AssertionError("peeked for a selector that does not want ages")

    monkeypatch.setattr(app.engine, "peek", no_peek)
    loop = WorkerLoop(app, QUEUES, NoAges(), worker="w1", configure=False)
    try:
        assert loop.select().name == "high"
    finally:
        loop.close()


def test_aged_priority_runs_in_the_loop(app: App) -> None:
    now = time.time()
    app.engine.put("high", "h1", "Some.Task", now=now - 5.0)
    app.engine.put("low", "l1", "Some.Task", now=now - 3600.0)
    loop = WorkerLoop(app, QUEUES, resolve_selector("aged-priority"), worker="w1", configure=False)
    try:
        assert loop.select().name == "high"  # an hour at priority 5 is not 5 seconds at 100
        app.engine.pop("high", "w2", 1)
        loop._ready = (0.0, frozenset())
        assert loop.select().name == "low"
    finally:
        loop.close()

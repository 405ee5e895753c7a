"""pop(wait=...) blocks until work arrives, without waiting out the whole `wait`.

Real time is unavoidable here: these tests use the wall clock (`now` left as None) and
measure how long pop took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from lanner import Capability, Engine

from .helpers import jids, require

WAIT = 8.0  # far longer than any test should block
PROMPT = 4.0  # "returned promptly": half of WAIT, generous for a machine with both cores busy
DELAY = 0.3  # how long after the pop starts the work arrives


@pytest.fixture(autouse=True)
def _needs_blocking_pop(engine: Engine) -> None:
    require(engine, Capability.BLOCKING_POP)


@contextmanager
def later(action: Callable[[], object], after: float = DELAY) -> Iterator[None]:
    """Run `action` in another thread `after` seconds from now; re-raise its error."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:
            errors.append(error)

    timer = threading.Timer(after, run)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join(timeout=WAIT + 5)
    if errors:
        raise errors[0]


def timed_pop(engine: Engine, queue: str, worker: str, wait: float) -> tuple[list[str], float]:
    start = time.monotonic()
    popped = engine.pop(queue, worker, wait=wait)
    return jids(popped), time.monotonic() - start


def test_pop_with_wait_returns_at_once_when_work_is_there(engine: Engine) -> None:
    engine.put("q", "j1", "Task")
    got, took = timed_pop(engine, "q", "w1", WAIT)
    assert got == ["j1"]
    assert took < PROMPT


def test_pop_with_wait_returns_when_another_connection_puts(
    engine: Engine, connect: Callable[[], Engine]
) -> None:
    other = connect()
    with later(lambda: other.put("q", "j1", "Task")):
        got, took = timed_pop(engine, "q", "w1", WAIT)
    assert got == ["j1"]
    assert DELAY * 0.5 < took < PROMPT


def test_pop_with_wait_returns_when_the_same_engine_puts_from_another_thread(
    engine: Engine,
) -> None:
    with later(lambda: engine.put("q", "j1", "Task")):
        got, took = timed_pop(engine, "q", "w1", WAIT)
    assert got == ["j1"]
    assert took < PROMPT


def test_pop_with_wait_returns_when_a_job_is_retried(
    engine: Engine, connect: Callable[[], Engine]
) -> None:
    other = connect()
    other.put("q", "j1", "Task")
    assert jids(other.pop("q", "w1")) == ["j1"]

    with later(lambda: other.retry("j1", "q", "w1")):
        got, took = timed_pop(engine, "q", "w2", WAIT)
    assert got == ["j1"]
    assert took < PROMPT


def test_pop_with_wait_returns_a_job_that_becomes_due_during_the_wait(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=0.5)
    got, took = timed_pop(engine, "q", "w1", WAIT)
    assert got == ["j1"]
    assert 0.3 < took < PROMPT


@pytest.mark.requires(Capability.CONFIG)
def test_pop_with_wait_returns_a_job_whose_lock_runs_out_during_the_wait(
    engine: Engine,
) -> None:
    engine.config_set("grace-period", 0)
    engine.config_set("q-heartbeat", 0.5)
    engine.put("q", "j1", "Task")
    assert jids(engine.pop("q", "w1")) == ["j1"]

    got, took = timed_pop(engine, "q", "w2", WAIT)

    assert got == ["j1"]
    assert took < PROMPT


def test_pop_with_wait_on_an_empty_queue_gives_nothing_after_about_wait(engine: Engine) -> None:
    got, took = timed_pop(engine, "q", "w1", 0.5)
    assert got == []
    assert 0.45 <= took < 0.5 + PROMPT


def test_pop_with_wait_ignores_work_put_into_other_queues(
    engine: Engine, connect: Callable[[], Engine]
) -> None:
    other = connect()
    with later(lambda: other.put("elsewhere", "j1", "Task"), after=0.1):
        got, took = timed_pop(engine, "q", "w1", 0.6)
    assert got == []
    assert took >= 0.55
    assert other.queue_counts("elsewhere").waiting == 1

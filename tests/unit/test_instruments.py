"""`lanner.instruments`: what an App's instruments see of its publishes and its workers'
runs (a SQLite file, the worker loop through `drain`), and the headers jobs carry."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner.app import App
from lanner.codec import JobIdentity, JSONCodec, Payload, SignedPickleCodec, decode
from lanner.instruments import Instrument, Run
from lanner.prepared import Message

IDENTITY = JobIdentity("j1", "m.task", "q")


class Seen(Instrument):
    """Keeps what it is shown, and says which it is in what it carries."""

    def __init__(self, name: str, seen: list[str], runs: list[Run] | None = None) -> None:
        self.name, self.seen, self.runs = name, seen, runs if runs is not None else []

    @contextlib.contextmanager
    def publishing(self, app: App, messages: Sequence[Message]) -> Iterator[None]:
        self.seen.append(f"{self.name} publishes {len(messages)}")
        yield
        self.seen.append(f"{self.name} published")

    def headers(self) -> Mapping[str, str]:
        return {self.name: "yes"}

    @contextlib.contextmanager
    def running(self, run: Run) -> Iterator[None]:
        self.seen.append(f"{self.name} runs {run.task.name.rsplit('.', 1)[-1]}")
        yield
        self.runs.append(run)
        self.seen.append(f"{self.name} ran: {run.outcome}")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = App(url, settings=lanner.Settings(broker=url, retry_delay_multiple_sec=0))
    yield app
    app.close()


def test_headers_travel_beside_the_arguments() -> None:
    payload = Payload((1,), {"b": 2}, "data", {"traceparent": "00-x"})
    data = JSONCodec().encode(payload, IDENTITY)
    assert json.loads(data)["headers"] == {"traceparent": "00-x"}
    assert decode(data, IDENTITY) == payload
    plain = JSONCodec().encode(Payload((1,), {"b": 2}, "data"), IDENTITY)
    assert "headers" not in plain  # without any, the envelope is what it always was
    assert decode(plain, IDENTITY).headers is None


def test_headers_are_not_signed() -> None:
    codec = SignedPickleCodec(b"k" * 16)
    data = codec.encode(Payload((object,), {}, None, {"traceparent": "00-x"}), IDENTITY)
    envelope = json.loads(data)
    envelope["headers"] = {"traceparent": "00-other"}  # metadata: not the arguments
    payload = decode(json.dumps(envelope), IDENTITY, codec)
    assert payload.args == (object,)
    assert payload.headers == {"traceparent": "00-other"}


@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        ([1, 2], None),
        ("traceparent", None),
        ({"a": "1", "b": 2, "c": None}, {"a": "1"}),
        ({"b": 2}, None),
    ],
)
def test_headers_that_are_not_strings_are_dropped(headers: Any, kept: Any) -> None:
    data = json.dumps({"v": 1, "args": [], "kwargs": {}, "headers": headers})
    assert decode(data, IDENTITY).headers == kept


def test_instruments_see_a_publish_and_each_run(app: App) -> None:
    seen: list[str] = []
    runs: list[Run] = []
    app.instrument(Seen("first", seen, runs))

    class Second(Seen):
        pass

    app.instrument(Second("second", seen))

    @app.task(queue="q", max_retries=1)
    def works() -> None:
        seen.append("works")

    @app.task(queue="q", max_retries=1)
    def breaks() -> None:
        raise ValueError("broken")

    app.publish_many([works.message(), breaks.message()])
    [work_job, broken_job] = app.engine.peek("q", 2)
    assert json.loads(work_job.data)["headers"] == {"first": "yes", "second": "yes"}
    assert lanner.drain(app, raise_errors=False) == 3

    assert seen == [
        "first publishes 2", "second publishes 2", "second published", "first published",
        "first runs works", "second runs works", "works", "second ran: completed",
        "first ran: completed",
        "first runs breaks", "second runs breaks", "second ran: retried", "first ran: retried",
        "first runs breaks", "second runs breaks", "second ran: failed", "first ran: failed",
    ]  # fmt: skip
    assert [(run.job.jid, run.outcome, type(run.error)) for run in runs] == [
        (work_job.jid, "completed", type(None)),
        (broken_job.jid, "retried", ValueError),
        (broken_job.jid, "failed", ValueError),
    ]
    assert runs[0].headers == {"first": "yes", "second": "yes"}


def test_one_instrument_of_a_kind(app: App) -> None:
    seen: list[str] = []
    app.instrument(Seen("old", seen))
    app.instrument(Seen("new", seen))
    assert [instrument.name for instrument in app.instruments] == ["new"]  # type: ignore[attr-defined]


def test_a_failed_run_leaves_its_notes_for_the_next(app: App) -> None:
    noted: list[Mapping[str, Any]] = []

    class Noting(Instrument):
        @contextlib.contextmanager
        def running(self, run: Run) -> Iterator[None]:
            noted.append(dict(run.noted_before()))
            run.notes["try"] = str(len(noted))
            yield

    app.instrument(Noting())

    @app.task(queue="q", max_retries=2)
    def breaks() -> None:
        raise ValueError("broken")

    breaks.delay()
    assert lanner.drain(app, raise_errors=False) == 3
    assert noted == [{}, {"try": "1"}, {"try": "2"}]


def test_a_deferred_run_has_no_outcome(app: App) -> None:
    runs: list[Run] = []
    app.instrument(Seen("only", [], runs))

    class Later(lanner.Task):
        queue = "q"

        def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
            return False

        def run_task(self) -> None:
            raise AssertionError("deferred: never run")

    Later.app = app
    app.publish(Later)
    lanner.drain(app, raise_errors=False)
    assert runs == []  # deferred before it ran: the instruments saw no run

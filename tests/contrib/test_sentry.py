"""`lanner.contrib.sentry`: task errors of real runs (a SQLite file, the worker loop through
`drain`) reach Sentry with their job's context, caught by a transport that keeps what the
SDK sends instead of sending it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import lanner
from lanner.contrib import sentry


class Kept(Transport):
    """What the SDK would have sent: the events of its envelopes."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            if item.type == "event":
                event = item.get_event()
                assert event is not None
                self.events.append(dict(event))


@pytest.fixture
def kept() -> Iterator[Kept]:
    transport = Kept()
    # No integration of Sentry's own: each patches libraries (threading, subprocess, redis,
    # starlette...) for the rest of the process, which runs the other tests too.
    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1",
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
    )
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.init(default_integrations=False, auto_enabling_integrations=False)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[lanner.App]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = lanner.App(url, settings=lanner.Settings(broker=url, retry_delay_multiple_sec=0))
    yield app
    app.close()


def test_a_task_error_reaches_sentry_with_its_job(app: lanner.App, kept: Kept) -> None:
    sentry.instrument(app)

    @app.task(queue="billing", max_retries=1)
    def charge(customer: str) -> None:
        raise ValueError(f"card of {customer} declined")

    jid = charge.options(tags=["vip"]).delay("c-42")
    assert lanner.drain(app, raise_errors=False) == 2
    sentry_sdk.flush()

    outcomes = ["retried", "failed"]  # the try retried, and the one that failed for good
    for attempt, (event, outcome) in enumerate(zip(kept.events, outcomes, strict=True), 1):
        [exception] = event["exception"]["values"]
        assert exception["type"] == "ValueError"
        assert exception["value"] == "card of c-42 declined"
        assert exception["mechanism"] == {"type": "lanner", "handled": False}
        assert event["tags"] == {
            "lanner.queue": "billing",
            "lanner.task": charge.name,
            "lanner.jid": jid,
            "lanner.attempt": str(attempt),
            "lanner.tags": "vip",
            "lanner.outcome": outcome,
        }
        context = event["contexts"]["lanner"]
        assert context["jid"] == jid
        assert context["attempt"] == attempt
        assert context["tags"] == ["vip"]


def test_only_failures_for_good_if_asked(app: lanner.App, kept: Kept) -> None:
    sentry.instrument(app, retried=False)

    @app.task(queue="billing", max_retries=2)
    def charge() -> None:
        raise ValueError("declined")

    charge.delay()
    assert lanner.drain(app, raise_errors=False) == 3
    sentry_sdk.flush()
    assert [event["tags"]["lanner.attempt"] for event in kept.events] == ["3"]


def test_what_a_task_reports_itself_carries_its_job(app: lanner.App, kept: Kept) -> None:
    sentry.instrument(app)

    @app.task(queue="reports")
    def report() -> None:
        sentry_sdk.capture_message("halfway")

    jid = report.delay()
    assert lanner.drain(app) == 1
    sentry_sdk.flush()
    [event] = kept.events
    assert event["message"] == "halfway"
    assert event["tags"]["lanner.jid"] == jid
    # The job's scope ended with its run: nothing of it is left behind.
    sentry_sdk.capture_message("after")
    sentry_sdk.flush()
    assert "lanner.jid" not in kept.events[-1].get("tags", {})


def test_an_app_not_instrumented_reports_nothing(app: lanner.App, kept: Kept) -> None:
    @app.task(max_retries=0)
    def broken() -> None:
        raise ValueError("x")

    broken.delay()
    assert lanner.drain(app, raise_errors=False) == 1
    sentry_sdk.flush()
    assert [event for event in kept.events if "exception" in event] == []

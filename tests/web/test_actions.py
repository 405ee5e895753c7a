"""What a signed-in user changes from the dashboard, checked in the engine."""

from __future__ import annotations

from starlette.testclient import TestClient

from lanner import Capability, Engine
from lanner.job import JobState

from .conftest import populate

GROUP = "tasks.send-ValueError"


def _act(client: TestClient, action: str, **fields: str) -> str:
    guard = client.app.state.guard  # type: ignore[attr-defined]
    response = client.post(f"/act/{action}", data={**fields, "csrf": guard.csrf, "next": "/"},
                           follow_redirects=False)  # fmt: skip
    assert response.status_code == 303, response.text
    return str(response.headers["location"])


def test_retry_a_failure_group(engine: Engine, signed_in: TestClient) -> None:
    if Capability.FAILURES not in engine.capabilities:
        return
    jids = populate(engine)
    assert "retried+1+jobs" in _act(signed_in, "retry-group", group=GROUP)
    job = engine.get(jids["failed"])
    assert job is not None
    assert job.state is JobState.WAITING
    assert engine.failed_groups() == {}


def test_cancel_a_failure_group(engine: Engine, signed_in: TestClient) -> None:
    if Capability.FAILURES not in engine.capabilities:
        return
    jids = populate(engine)
    assert "cancelled+1+jobs" in _act(signed_in, "cancel-group", group=GROUP)
    assert engine.get(jids["failed"]) is None


def test_retry_and_cancel_one_job(engine: Engine, signed_in: TestClient) -> None:
    if Capability.LOOKUP not in engine.capabilities:
        return
    jids = populate(engine)
    _act(signed_in, "retry-job", jid=jids["failed"])
    job = engine.get(jids["failed"])
    assert job is not None
    assert job.state is JobState.WAITING
    assert job.tags == ("welcome",)
    again = signed_in.post("/act/retry-job", data={"jid": jids["failed"], "csrf": _csrf(signed_in)})
    assert again.status_code == 409  # it is waiting now: nothing to retry
    _act(signed_in, "cancel-job", jid=jids["waiting"])
    assert engine.get(jids["waiting"]) is None


def _csrf(client: TestClient) -> str:
    return str(client.app.state.guard.csrf)  # type: ignore[attr-defined]


def test_pause_and_unpause_a_queue(engine: Engine, signed_in: TestClient) -> None:
    if Capability.PAUSE not in engine.capabilities:
        return
    populate(engine)
    _act(signed_in, "pause", queue="reports")
    assert engine.queue_counts("reports").paused
    assert "Unpause" in signed_in.get("/queues/reports").text
    _act(signed_in, "unpause", queue="reports")
    assert not engine.queue_counts("reports").paused

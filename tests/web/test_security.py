"""Who may act: the token, sessions, CSRF, origins, hosts and headers."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from lanner import Capability, Engine

from .conftest import TOKEN, client_for, populate

pytestmark = pytest.mark.usefixtures("engine")


def _pause_form(client: TestClient, csrf: str | None = None) -> dict[str, str]:
    guard = client.app.state.guard  # type: ignore[attr-defined]
    return {"queue": "emails", "csrf": guard.csrf if csrf is None else csrf, "next": "/"}


def test_without_a_token_the_dashboard_is_read_only(engine: Engine) -> None:
    populate(engine)
    with client_for(engine, token=None) as client:
        page = client.get("/queues/emails").text
        assert "read-only" in page
        assert "data-action" not in page  # no action buttons
        refused = client.post("/act/pause", data={"queue": "emails"})
        assert refused.status_code == 403
        assert "read-only" in refused.text
        login = client.post("/login", data={"token": ""}, follow_redirects=False)
        assert login.status_code == 303
        assert "lanner_session" not in login.headers.get("set-cookie", "")


def test_signing_in_takes_the_token(client: TestClient) -> None:
    wrong = client.post("/login", data={"token": "guess"}, follow_redirects=False)
    assert wrong.status_code == 303
    assert "wrong+token" in wrong.headers["location"]
    assert "lanner_session" not in wrong.headers.get("set-cookie", "")
    right = client.post("/login", data={"token": TOKEN, "next": "/failures"},
                        follow_redirects=False)  # fmt: skip
    cookie = right.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert TOKEN not in cookie
    assert right.headers["location"].startswith("/failures?")


def test_an_action_needs_a_session_and_the_csrf_value(engine: Engine, client: TestClient) -> None:
    if Capability.PAUSE not in engine.capabilities:
        return
    populate(engine)
    assert client.post("/act/pause", data=_pause_form(client)).status_code == 403  # not signed in
    client.post("/login", data={"token": TOKEN})
    missing = client.post("/act/pause", data=_pause_form(client, csrf=""))
    assert missing.status_code == 403
    assert "CSRF" in missing.text
    assert not engine.queue_counts("emails").paused
    done = client.post("/act/pause", data=_pause_form(client), follow_redirects=False)
    assert done.status_code == 303
    assert engine.queue_counts("emails").paused


def test_a_request_from_another_site_is_refused(engine: Engine, signed_in: TestClient) -> None:
    if Capability.PAUSE not in engine.capabilities:
        return
    populate(engine)
    refused = signed_in.post("/act/pause", data=_pause_form(signed_in),
                             headers={"origin": "http://evil.example"})  # fmt: skip
    assert refused.status_code == 403
    assert "another site" in refused.text
    login = signed_in.post("/login", data={"token": TOKEN},
                           headers={"referer": "http://evil.example/x"})  # fmt: skip
    assert login.status_code == 403
    assert not engine.queue_counts("emails").paused


def test_a_script_acts_with_the_token_as_bearer(engine: Engine) -> None:
    if Capability.PAUSE not in engine.capabilities:
        return
    populate(engine)
    with client_for(engine, TOKEN) as client:
        headers = {"authorization": f"Bearer {TOKEN}"}
        done = client.post("/act/pause", data={"queue": "emails"}, headers=headers,
                           follow_redirects=False)  # fmt: skip
        assert done.status_code == 303
        assert engine.queue_counts("emails").paused
        wrong = client.post("/act/unpause", data={"queue": "emails"},
                            headers={"authorization": "Bearer nope"})  # fmt: skip
        assert wrong.status_code == 403


def test_redirects_stay_on_the_dashboard(engine: Engine, signed_in: TestClient) -> None:
    if Capability.PAUSE not in engine.capabilities:
        return
    populate(engine)
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        form = {**_pause_form(signed_in), "next": target}
        response = signed_in.post("/act/pause", data=form, follow_redirects=False)
        assert response.headers["location"].startswith("/?flash=")


def test_other_hosts_are_refused(client: TestClient) -> None:
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/", headers={"host": "localhost:8077"}).status_code == 200


def test_pages_carry_security_headers(client: TestClient) -> None:
    headers = client.get("/").headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"


def test_an_unknown_action_or_bad_subject_is_refused(engine: Engine, signed_in: TestClient) -> None:
    guard = signed_in.app.state.guard  # type: ignore[attr-defined]
    unknown = signed_in.post("/act/drop-everything", data={"csrf": guard.csrf})
    assert unknown.status_code == 404
    bad = signed_in.post("/act/pause", data={"queue": "no such queue", "csrf": guard.csrf})
    assert bad.status_code == 400

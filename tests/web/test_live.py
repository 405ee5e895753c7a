"""The live stream (`/live`) over a real server: what a page hears when the store changes."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest

from lanner import Capability, Engine
from lanner.web import WebThread


def _events(response: Any) -> Any:
    for raw in response:
        line = raw.decode().strip()
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_a_put_reaches_an_open_page(engine: Engine) -> None:
    if Capability.EVENTS not in engine.capabilities:
        pytest.skip(f"the {engine.name} engine has no events: watched instead (below)")
    with WebThread(engine) as web, urllib.request.urlopen(web.url + "/live", timeout=20) as page:
        assert page.headers["content-type"].startswith("text/event-stream")
        assert page.readline() == b"retry: 2000\n"  # subscribed
        engine.put("emails", "live-1", "tasks.send", "{}")
        heard = next(_events(page))
    assert heard == {"kind": "put", "jid": "live-1", "queue": "emails"}


def test_an_engine_without_events_is_watched(engine: Engine) -> None:
    if Capability.EVENTS in engine.capabilities:
        return
    stop = threading.Event()

    def publish() -> None:  # until heard: the watch's first read may already count a job
        n = 0
        while not stop.wait(0.5):
            engine.put("emails", f"watched-{n}", "tasks.send", "{}")
            n += 1

    with WebThread(engine) as web, urllib.request.urlopen(web.url + "/live", timeout=20) as page:
        assert page.readline() == b"retry: 2000\n"
        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
            heard = next(_events(page))
        finally:
            stop.set()
            publisher.join()
    assert heard == {"kind": "changed"}


def test_stopping_the_server_ends_open_streams(engine: Engine) -> None:
    web = WebThread(engine)
    web.start()
    with urllib.request.urlopen(web.url + "/live", timeout=20) as response:
        web.stop()
        assert response.read() in (b"", b"retry: 2000\n\n")  # the stream ended, not hung

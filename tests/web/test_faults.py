"""The dashboard while its store is away: pages say so, the live stream waits, both recover."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Protocol

import lanner
from lanner.web import WebThread


class RedisServer(Protocol):  # tests/conftest.py's, started by `redis_server_factory`
    url: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


def _status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_redis_restart_is_a_page_not_a_crash_and_the_stream_goes_on(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    engine = lanner.open_engine(server.url + "?retries=1")
    with engine, WebThread(engine) as web, urllib.request.urlopen(web.url + "/live") as page:
        assert page.readline() == b"retry: 2000\n"
        server.stop()
        status, body = _status(web.url + "/")
        assert status == 503
        assert "Redis" in body or "redis" in body
        assert "Traceback" not in body
        server.start()
        assert _status(web.url + "/")[0] == 200
        heard: list[dict[str, str]] = []
        while not heard or heard[-1].get("jid") != "after":
            line = page.readline().decode()
            if line.startswith("data: "):
                heard.append(json.loads(line[len("data: ") :]))
                if heard[-1]["kind"] == "gap":
                    engine.put("emails", "after", "tasks.send", "{}")
    assert heard[0] == {"kind": "gap"}  # the page is told it may have missed events
    assert heard[-1] == {"kind": "put", "jid": "after", "queue": "emails"}

"""Serving the dashboard with uvicorn: `serve` in the foreground (the `lanner web` command),
`WebThread` on a thread of this process (tests, notebooks, embedding beside an app)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from types import FrameType
from typing import Final

import uvicorn

from lanner.engine import Engine
from lanner.errors import LannerError
from lanner.web.app import create_app
from lanner.web.live import Hub

GRACE_SEC: Final = 2
"""How long a shutdown waits for requests in flight."""


class _Server(uvicorn.Server):
    """uvicorn's server, which also ends the pages' live streams when told to stop: they
    never end by themselves, and uvicorn waits for open responses before it stops."""

    def __init__(self, engine: Engine, host: str, port: int, token: str | None) -> None:
        app = create_app(engine, token=token, host=host)
        self.hub: Hub = app.state.hub
        super().__init__(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=GRACE_SEC,
                lifespan="on",
            )
        )

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.hub.end_streams()
        super().handle_exit(sig, frame)


def serve(engine: Engine, host: str, port: int, token: str | None) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM), then return.

    uvicorn handles the signal, shuts down, then raises it again for the handler found
    before it: that one ends the process quietly (status 0), not by the signal itself.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_quietly)
    _Server(engine, host, port, token).run()


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


class WebThread:
    """The dashboard served on a thread: `with WebThread(engine) as web: web.url`."""

    def __init__(
        self, engine: Engine, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None
    ) -> None:
        self._server = _Server(engine, host, port, token)
        self._thread = threading.Thread(target=self._run, name="lanner-web", daemon=True)
        self.host = host
        self.port = port

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise LannerError(f"the dashboard did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.hub.end_streams()
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> WebThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

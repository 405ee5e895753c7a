"""A worker pool's own metrics, and the HTTP server of `lanner worker --metrics-port`.

`PoolMetrics` is the pool's observer (lanner.worker.observer): the supervisor tells it
of each job's end (from the reports its children send anyway: nothing more crosses the
pipes per job), of its children, recycles, kills and engine errors. Its metrics live in
a registry of its own:

    lanner_jobs_total{queue,task,outcome}   counter: jobs whose run ended, by outcome:
                                            completed, failed, retried, stopped
    lanner_job_run_seconds{queue}           histogram: how long tasks ran
    lanner_worker_children                  gauge: the supervisor's live child processes
    lanner_worker_recycles_total{reason}    counter: children replaced at a limit
                                            (max-tasks, max-memory)
    lanner_worker_hard_kills_total          counter: children killed for a task past its
                                            time limit (or not stopping when told)
    lanner_engine_errors_total{process}     counter: failed engine commands, in the
                                            supervisor or a worker process

`MetricsServer` serves them over HTTP from one thread of the supervisor. No thread, lock
in use or socket of it may cross a fork, so before the supervisor forks the server stops:
its thread ends (it handles one request at a time, and looks for a stop every 50 ms) and
its listening socket is closed; after the forks it binds the same address again. A
scrape in between is refused: forks are rare (start, recycling, a child's death).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from lanner.worker.observer import Process

__all__ = ["RUN_BUCKETS", "MetricsServer", "PoolMetrics"]

logger = logging.getLogger("lanner.metrics")

RUN_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0,
)  # fmt: skip
"""lanner_job_run_seconds' buckets (seconds; +Inf follows)."""

STOP_CHECK_SEC: Final = 0.05
"""How often the server's thread, waiting for a request, looks whether it is to stop."""

REQUEST_TIMEOUT_SEC: Final = 2.0
"""A client's request must arrive within this long (one is served at a time)."""

REBIND_PAUSE_SEC: Final = 1.0
"""The least time between two tries to bind the address again after a failure."""


class PoolMetrics:
    """The metrics of one pool (a `PoolObserver`), and optionally their HTTP server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.jobs = Counter(
            "lanner_jobs",
            "Jobs whose run ended in this pool, by queue, task and outcome",
            ["queue", "task", "outcome"],
            registry=registry,
        )
        self.run_seconds = Histogram(
            "lanner_job_run_seconds",
            "How long the tasks of the queue's jobs ran in this pool",
            ["queue"],
            buckets=RUN_BUCKETS,
            registry=registry,
        )
        self.alive = Gauge(
            "lanner_worker_children", "Live worker processes of this pool", registry=registry
        )
        self.recycles = Counter(
            "lanner_worker_recycles",
            "Worker processes replaced at a limit (max-tasks, max-memory)",
            ["reason"],
            registry=registry,
        )
        self.hard_kills = Counter(
            "lanner_worker_hard_kills",
            "Worker processes killed: a task past its time limit and grace, or not stopping",
            registry=registry,
        )
        self.engine_errors = Counter(
            "lanner_engine_errors",
            "Engine commands that failed (the store away, mostly), by process",
            ["process"],
            registry=registry,
        )
        self.server: MetricsServer | None = None

    def serve(self, host: str, port: int) -> MetricsServer:
        """Serve the metrics on host:port (0: a free port, `server.port` then says which);
        binds now, so a port in use fails here (OSError)."""
        self.server = MetricsServer(self.registry, host, port)
        self.server.start()
        return self.server

    # -- PoolObserver ---------------------------------------------------------------------
    def job_finished(self, queue: str, task: str, outcome: str, seconds: float) -> None:
        self.jobs.labels(queue, task, outcome).inc()
        if outcome != "stopped":  # a task stopped from outside did not run its course
            self.run_seconds.labels(queue).observe(seconds)

    def children(self, alive: int) -> None:
        self.alive.set(alive)

    def recycled(self, reason: str) -> None:
        self.recycles.labels(reason).inc()

    def hard_killed(self) -> None:
        self.hard_kills.inc()

    def engine_error(self, process: Process) -> None:
        self.engine_errors.labels(process).inc()

    def ready_to_fork(self) -> bool:
        return self.server is None or self.server.pause()

    def forked(self) -> None:
        if self.server is not None:
            self.server.resume()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


class _QuietHandler(WSGIRequestHandler):
    """Logs nothing per request (scrapes come every few seconds)."""

    timeout = REQUEST_TIMEOUT_SEC

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(WSGIServer):
    timeout = STOP_CHECK_SEC  # handle_request() returns after this long without a request

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("metrics request from %s failed", client_address, exc_info=True)


class MetricsServer:
    """An HTTP server of a registry in one thread, stopped and closed around forks.

    `start` binds and starts the thread; `pause` stops it without waiting long (True once
    the thread has ended and the socket is closed); `resume` binds the same address again;
    `close` ends it for good. Only the thread that owns the server calls these.
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._app = make_wsgi_app(registry)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._next_bind = 0.0

    @property
    def serving(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Bind (OSError if it cannot) and serve in a new thread."""
        server = make_server(
            self.host, self.port, self._app, server_class=_Server, handler_class=_QuietHandler
        )
        self.port = server.server_port  # a port 0 asked for becomes the one given, kept
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(server, self._stop), name="lanner-metrics", daemon=True
        )
        self._thread.start()

    @staticmethod
    def _serve(server: _Server, stop: threading.Event) -> None:
        while not stop.is_set():
            server.handle_request()

    def pause(self, wait: float = 2 * STOP_CHECK_SEC) -> bool:
        """Stop serving: True once nothing of the server is left (thread, socket); False
        if its thread is still in a request after `wait` seconds (ask again later)."""
        if self._thread is None:
            return True
        self._stop.set()
        self._thread.join(wait)
        if self._thread.is_alive():
            return False
        assert self._server is not None
        self._server.server_close()
        self._server, self._thread = None, None
        return True

    def resume(self) -> None:
        """Serve again on the same address; a failure to bind is logged, and tried again
        at the next `resume` a second or more later."""
        if self._closed or self._thread is not None or time.monotonic() < self._next_bind:
            return
        try:
            self.start()
        except OSError as error:
            self._next_bind = time.monotonic() + REBIND_PAUSE_SEC
            logger.error("metrics: cannot listen on %s:%d again: %s", self.host, self.port, error)

    def close(self) -> None:
        self._closed = True
        while not self.pause(wait=REQUEST_TIMEOUT_SEC):
            pass

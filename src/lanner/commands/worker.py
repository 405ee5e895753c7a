"""`lanner worker`: run a supervised pool of worker processes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from lanner import limits
from lanner.app import App
from lanner.commands.bounded import BoundedFloat, BoundedInt
from lanner.commands.common import app_option, broker_option, load_app
from lanner.errors import LannerError
from lanner.queues import QueueConfig, load_queue_config, queues_from_names
from lanner.worker import logs

if TYPE_CHECKING:
    from lanner.metrics.pool import PoolMetrics
    from lanner.outbox.relay import OutboxRelay


def choose_queues(app: App, names: str | None, path: str | None) -> tuple[QueueConfig, ...]:
    """`--queues FILE`, else the configured queues named by `-Q` (or new ones), else the
    configured queues and those of the app's tasks."""
    if not names:
        return load_queue_config(path) if path else app.served_queues()
    configured = load_queue_config(path) if path else app.queues
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    by_name = {queue.name: queue for queue in configured}
    if all(name in by_name for name in wanted):
        return tuple(by_name[name] for name in wanted)
    return queues_from_names(wanted)


def serve_metrics(host: str, port: int) -> PoolMetrics:
    """The pool's metrics, served on host:port from now on (a one-line error if not)."""
    try:
        from lanner.metrics.pool import PoolMetrics
    except ImportError:
        raise click.ClickException(
            "--metrics-port needs prometheus_client: pip install 'lanner[metrics]'"
        ) from None
    metrics = PoolMetrics()
    try:
        server = metrics.serve(host, port)
    except OSError as error:
        raise click.ClickException(f"cannot serve metrics on {host}:{port}: {error}") from None
    logging.getLogger("lanner.cli").info("metrics on http://%s:%d/metrics", host, server.port)
    return metrics


def pool_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of `lanner worker` that shape its pool (all but where the app comes
    from): also those of Django's `manage.py lanner_worker`."""
    for option in reversed(_POOL_OPTIONS):
        command = option(command)
    return command


_POOL_OPTIONS: list[Callable[[Callable[..., None]], Callable[..., None]]] = [
    click.option(
        "-Q",
        "--queues-list",
        "queue_names",
        metavar="Q1,Q2",
        help="Queues to serve (default: the configured ones, and those of the app's tasks).",
    ),
    click.option(
        "--queues", "queue_file", metavar="FILE", help="Queue config YAML (Kale's format)."
    ),
    click.option(
        "-c",
        "--concurrency",
        default=2,
        show_default=True,
        type=BoundedInt(1, limits.MAX_PROCESSES),
        help="Worker processes to run.",
    ),
    click.option(
        "-t",
        "--tasks-per-process",
        type=BoundedInt(1, limits.MAX_TASKS_PER_PROCESS),
        metavar="N",
        help="Jobs each process runs at once: async tasks share its "
        "event loop (default: settings, else 1).",
    ),
    click.option(
        "--threads",
        type=BoundedInt(1, limits.MAX_THREADS),
        metavar="N",
        help="Of those, how many sync tasks may run at once, in threads (default: "
        "settings, else 1).",
    ),
    click.option("--selector", metavar="NAME", help="Queue selector (default: reduced-lottery)."),
    click.option(
        "--max-tasks-per-child",
        type=BoundedInt(1, limits.MAX_TASKS_PER_CHILD),
        help="Recycle after N tasks.",
    ),
    click.option(
        "--max-memory-per-child",
        type=BoundedInt(1, limits.MAX_MEMORY_MB),
        metavar="MB",
        help="Recycle a child whose memory passes MB.",
    ),
    click.option(
        "--shutdown-timeout",
        type=BoundedFloat(0, limits.MAX_SHUTDOWN_TIMEOUT_SEC),
        metavar="S",
        help="Seconds running tasks get on SIGTERM before children are killed.",
    ),
    click.option(
        "--log-level",
        default="INFO",
        show_default=True,
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        help="DEBUG also logs each job done, with its run time.",
    ),
    click.option(
        "--metrics-port",
        type=click.IntRange(min=0, max=65535),
        metavar="PORT",
        help="Serve the pool's Prometheus metrics on PORT (lanner[metrics]).",
    ),
    click.option(
        "--metrics-host",
        default="127.0.0.1",
        show_default=True,
        metavar="HOST",
        help="The address --metrics-port listens on.",
    ),
]


@click.command()
@app_option
@broker_option
@click.option("--outbox", "outbox_url", metavar="sqlite:///PATH",
              help="Relay the jobs published within transactions of this SQLite database "
                   "(its outbox) to the broker.")  # fmt: skip
@pool_options
def worker(
    app_path: str | None,
    broker: str | None,
    outbox_url: str | None,
    queue_names: str | None,
    queue_file: str | None,
    **options: Any,
) -> None:
    """Run N worker processes under a supervisor until SIGTERM or Ctrl-C.

    The first signal is a warm shutdown (running tasks finish, the rest is given back);
    a second one, or the shutdown timeout, kills the children (their jobs are given back).
    """
    logs.configure(str(options["log_level"]).upper())
    try:
        app = load_app(app_path, broker)
        relay = None
        if outbox_url:
            relay = sqlite_outbox_relay(app, outbox_url)
        run_pool(app, choose_queues(app, queue_names, queue_file), relay=relay, **options)
    except LannerError as error:
        raise click.ClickException(str(error)) from None
    logging.getLogger("lanner.cli").info("worker exited")


def sqlite_outbox_relay(app: App, url: str) -> OutboxRelay:
    """The relay of the outbox in the SQLite database `url` names, to `app`'s broker."""
    from lanner.engines import sqlite_path
    from lanner.outbox.relay import OutboxRelay
    from lanner.outbox.sqlite import SQLiteOutbox

    path = sqlite_path(url)
    if path is None:
        raise click.ClickException(f"--outbox takes sqlite:///PATH, not {url!r}")
    return OutboxRelay(lambda: app.reopen_engine(max_wait=30.0), SQLiteOutbox(path))


def run_pool(
    app: App,
    queues: tuple[QueueConfig, ...],
    *,
    concurrency: int,
    tasks_per_process: int | None,
    threads: int | None,
    selector: str | None,
    max_tasks_per_child: int | None,
    max_memory_per_child: int | None,
    shutdown_timeout: float | None,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    relay: OutboxRelay | None = None,
) -> None:
    """Run the pool of `app` on `queues` (and `relay`, beside it) until it stops."""
    from lanner.worker.pool import WorkerPool  # here, so that `lanner --help` need not load it

    metrics = serve_metrics(metrics_host, metrics_port) if metrics_port is not None else None
    try:
        pool = WorkerPool(
            app,
            concurrency=concurrency,
            tasks_per_process=tasks_per_process,
            threads=threads,
            queues=queues,
            selector=selector,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child_mb=max_memory_per_child,
            shutdown_timeout=shutdown_timeout,
            observer=metrics,
        )
        if relay is not None:
            relay.start()
        try:
            pool.run()
        finally:
            if relay is not None:
                relay.stop()
    finally:
        if metrics is not None:
            metrics.close()

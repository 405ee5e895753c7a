"""`lanner worker`: run a supervised pool of worker processes."""

from __future__ import annotations

import logging

import click

from lanner.app import App
from lanner.commands.common import app_option, broker_option, load_app
from lanner.errors import LannerError
from lanner.queues import QueueConfig, load_queue_config, queues_from_names
from lanner.worker import logs


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


@click.command()
@app_option
@broker_option
@click.option(
    "-Q",
    "--queues-list",
    "queue_names",
    metavar="Q1,Q2",
    help="Queues to serve (default: the configured ones, and those of the app's tasks).",
)
@click.option("--queues", "queue_file", metavar="FILE", help="Queue config YAML (Kale's format).")
@click.option("-c", "--concurrency", default=2, show_default=True, type=click.IntRange(min=1),
              help="Worker processes to run (each runs one task at a time).")  # fmt: skip
@click.option("--selector", metavar="NAME", help="Queue selector (default: reduced-lottery).")
@click.option("--max-tasks-per-child", type=click.IntRange(min=1), help="Recycle after N tasks.")
@click.option("--max-memory-per-child", type=click.IntRange(min=1), metavar="MB",
              help="Recycle a child whose memory passes MB.")  # fmt: skip
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), metavar="S",
              help="Seconds running tasks get on SIGTERM before children are killed.")  # fmt: skip
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="DEBUG also logs each job done, with its run time.",
)
def worker(
    app_path: str | None,
    broker: str | None,
    queue_names: str | None,
    queue_file: str | None,
    concurrency: int,
    selector: str | None,
    max_tasks_per_child: int | None,
    max_memory_per_child: int | None,
    shutdown_timeout: float | None,
    log_level: str,
) -> None:
    """Run N worker processes under a supervisor until SIGTERM or Ctrl-C.

    The first signal is a warm shutdown (running tasks finish, the rest is given back);
    a second one, or the shutdown timeout, kills the children (their jobs are given back).
    """
    from lanner.worker.pool import WorkerPool  # here, so that `lanner --help` need not load it

    logs.configure(log_level.upper())
    try:
        app = load_app(app_path, broker)
        pool = WorkerPool(
            app,
            concurrency=concurrency,
            queues=choose_queues(app, queue_names, queue_file),
            selector=selector,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child_mb=max_memory_per_child,
            shutdown_timeout=shutdown_timeout,
        )
        pool.run()
    except LannerError as error:
        raise click.ClickException(str(error)) from None
    logging.getLogger("lanner.cli").info("worker exited")

"""`python manage.py lanner_worker`: `lanner worker` for a Django project.

It takes the options of `lanner worker` that shape the pool (`-c`, `-Q`, `-t`,
`--threads`, `--max-tasks-per-child`, ...), and `--backend ALIAS` (default: "default", a
`LannerBackend` of the TASKS setting) in place of `-A`/`--broker`: the broker and the
queues (QUEUES, unless `-Q` says) are the backend's. Django is set up before the pool
forks its workers, so each worker process has it; no database connection is left open
across a fork. With the backend's `outbox` option, the pool's supervisor also relays the
outbox (`lanner.outbox.relay`).
"""

from __future__ import annotations

import os
from typing import Any

import click
from django.core.management.base import BaseCommand

from lanner.app import set_default_app
from lanner.commands.worker import choose_queues, pool_options, run_pool
from lanner.errors import LannerError
from lanner.worker import logs


@click.command(name="lanner_worker")
@click.option("--backend", "alias", default="default", show_default=True, metavar="ALIAS",
              help="The LannerBackend of the TASKS setting to serve.")  # fmt: skip
@pool_options
def lanner_worker(
    alias: str, queue_names: str | None, queue_file: str | None, **options: Any
) -> None:
    """Run N lanner worker processes for Django's tasks until SIGTERM or Ctrl-C."""
    from django.db import connections

    from lanner.contrib.django import compat
    from lanner.contrib.django.backend import LannerBackend

    logs.configure(str(options["log_level"]).upper())
    try:
        backend = compat.task_backends()[alias]
    except Exception as error:  # Django's InvalidTaskBackend, or the backend's own
        raise click.ClickException(f"TASKS[{alias!r}]: {error}") from None
    if not isinstance(backend, LannerBackend):
        raise click.ClickException(f"TASKS[{alias!r}] is a {type(backend).__name__}, not "
                                   "lanner.contrib.django.LannerBackend")  # fmt: skip
    set_default_app(backend.app)
    try:
        if queue_names or queue_file:
            queues = choose_queues(backend.app, queue_names, queue_file)
        else:
            queues = backend.served_queues()
    except LannerError as error:
        raise click.ClickException(str(error)) from None
    relay = None
    if backend.outbox:
        from lanner.contrib.django.outbox import DjangoOutbox
        from lanner.outbox.relay import OutboxRelay

        app = backend.app
        relay = OutboxRelay(
            lambda: app.reopen_engine(max_wait=30.0), DjangoOutbox(backend.database)
        )
    connections.close_all()  # the workers open their own
    try:
        run_pool(backend.app, queues, relay=relay, **options)
    except LannerError as error:
        raise click.ClickException(str(error)) from None


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run a pool of lanner workers for Django's tasks (lanner_worker --help)."

    def run_from_argv(self, argv: list[str]) -> None:
        program = f"{os.path.basename(argv[0])} {argv[1]}"
        lanner_worker.main(args=argv[2:], prog_name=program)

    def handle(self, *args: Any, **options: Any) -> None:
        lanner_worker.main(args=list(args), prog_name="lanner_worker", standalone_mode=False)

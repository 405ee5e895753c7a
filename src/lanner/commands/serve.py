"""`lanner serve`: the Kestrel-compatible memcache server in front of the App's engine."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import click

from lanner.commands.bounded import BoundedInt
from lanner.commands.common import connection_options, session
from lanner.kestrel import DEFAULT_PORT, KestrelServer
from lanner.limits import MAX_OPEN_TRANSACTIONS
from lanner.queues import load_queue_config
from lanner.worker.loop import configure_queues


@click.command()
@connection_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. The memcache protocol has no authentication: "
                   "listen beyond this machine only on a network you trust.")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on (Kestrel's memcache port; 0: any free port).")  # fmt: skip
@click.option("--queues", "queues_file", type=click.Path(exists=True, dir_okay=False),
              help="Queue config YAML whose bounds (max_items, ...) to store first.")  # fmt: skip
@click.option("--max-open-transactions", type=BoundedInt(1, MAX_OPEN_TRANSACTIONS), default=1,
              show_default=True,
              help="Items one client may hold open per queue (get q/open) at once.")  # fmt: skip
def serve(
    app_path: str | None,
    broker: str | None,
    host: str,
    port: int,
    queues_file: str | None,
    max_open_transactions: int,
) -> None:
    """Serve the queues over Kestrel's memcache protocol (set q 0 0 N; get q/t=500/open).

    Any memcache client then puts and takes items: docs/kestrel.md.
    """
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"lanner serve: listening on {host}: the memcache protocol has no authentication, "
            "anyone who reaches this port can read and delete every queue",
            err=True,
        )
    with session(app_path, broker, create=True, serves=True) as app:
        if queues_file:
            configure_queues(app.engine, load_queue_config(queues_file))
        server = KestrelServer(app.engine, host, port, max_open_transactions=max_open_transactions)
        asyncio.run(_run(server))


async def _run(server: KestrelServer) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):  # before listening: a client may signal
        loop.add_signal_handler(signum, lambda: loop.create_task(server.stop()))
    try:
        await server.start()
    except OSError as error:
        where = f"{server.host}:{server.port}"
        raise click.ClickException(f"cannot listen on {where}: {error}") from None
    click.echo(f"lanner serve: memcache protocol on {server.host}:{server.port} "
               f"({server.engine.name} engine); Ctrl-C stops", err=True)  # fmt: skip
    with contextlib.suppress(asyncio.CancelledError):
        await server.serve_until_stopped()

"""`lanner serve`: the Kestrel-compatible memcache server in front of the App's engine."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import click

from lanner.commands.bounded import BoundedInt
from lanner.commands.common import connection_options, session
from lanner.errors import ConfigError
from lanner.eventloops import new_event_loop
from lanner.kestrel import DEFAULT_PORT, KestrelServer
from lanner.kestrel.processes import (
    DEFAULT_MAX_CONNECTIONS,
    raise_descriptor_limit,
    require_descriptors,
    reserve_port,
    run_processes,
)
from lanner.limits import MAX_CONNECTIONS, MAX_OPEN_TRANSACTIONS, MAX_PROCESSES
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
@click.option("-p", "--processes", type=BoundedInt(1, MAX_PROCESSES), default=1,
              show_default=True,
              help="Server processes sharing the port (SO_REUSEPORT): more cores for the "
                   "protocol's work. Stats are each process's own.")  # fmt: skip
@click.option("--max-connections", type=BoundedInt(1, MAX_CONNECTIONS),
              default=DEFAULT_MAX_CONNECTIONS, show_default=True,
              help="Connections one process takes at once; more are refused "
                   "(SERVER_ERROR). Each needs an open file: the limit (ulimit -n) is raised "
                   "to fit, up to its hard limit.")  # fmt: skip
def serve(
    app_path: str | None,
    broker: str | None,
    host: str,
    port: int,
    queues_file: str | None,
    max_open_transactions: int,
    processes: int,
    max_connections: int,
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
    max_connections = _fit_connections(max_connections)
    with session(app_path, broker, create=True, serves=True) as app:
        if queues_file:
            configure_queues(app.engine, load_queue_config(queues_file))
        if processes == 1:
            server = KestrelServer(
                app.engine,
                host,
                port,
                max_open_transactions=max_open_transactions,
                max_connections=max_connections,
            )
            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                runner.run(_run(server))
            return
    try:
        reserved = reserve_port(host, port)
    except (OSError, ConfigError) as error:
        raise click.ClickException(f"cannot listen on {host}:{port}: {error}") from None
    with reserved:
        port = reserved.getsockname()[1]
        click.echo(f"lanner serve: memcache protocol on {host}:{port}, {processes} processes; "
                   "Ctrl-C stops", err=True)  # fmt: skip
        options = (max_open_transactions, max_connections)
        status = run_processes(processes, serve_one, (app_path, broker, host, port, options))
    sys.exit(status)


def _fit_connections(asked: int) -> int:
    """`asked`, once the open-files limit fits it; a default that does not fit is lowered
    to what does (said on stderr), one given is refused (a one-line error)."""
    source = click.get_current_context().get_parameter_source("max_connections")
    if source is not click.core.ParameterSource.DEFAULT:
        try:
            require_descriptors(asked)
        except ConfigError as error:
            raise click.ClickException(str(error)) from None
        return asked
    fits = raise_descriptor_limit(asked).connections
    if fits >= asked:
        return asked
    if fits < 1:
        raise click.ClickException(
            "this process may open too few files to serve any connection: "
            "raise the limit (ulimit -n)"
        )
    click.echo(f"lanner serve: the open-files limit (ulimit -n) fits {fits} connections per "
               "process: more are refused", err=True)  # fmt: skip
    return fits


def serve_one(
    app_path: str | None, broker: str | None, host: str, port: int, options: tuple[int, int]
) -> None:
    """One of the processes of `lanner serve --processes N` (started by spawn)."""
    max_open_transactions, max_connections = options
    raise_descriptor_limit(max_connections)
    try:
        with session(app_path, broker, create=True, serves=True) as app:
            server = KestrelServer(
                app.engine,
                host,
                port,
                max_open_transactions=max_open_transactions,
                max_connections=max_connections,
                reuse_port=True,
            )
            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                runner.run(_run(server, quiet=True))
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)


async def _run(server: KestrelServer, *, quiet: bool = False) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):  # before listening: a client may signal
        loop.add_signal_handler(signum, lambda: loop.create_task(server.stop()))
    try:
        await server.start()
    except OSError as error:
        where = f"{server.host}:{server.port}"
        raise click.ClickException(f"cannot listen on {where}: {error}") from None
    if not quiet:
        click.echo(f"lanner serve: memcache protocol on {server.host}:{server.port} "
                   f"({server.engine.name} engine); Ctrl-C stops", err=True)  # fmt: skip
    with contextlib.suppress(asyncio.CancelledError):
        await server.serve_until_stopped()

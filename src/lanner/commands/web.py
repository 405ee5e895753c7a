"""`lanner web`: the dashboard (lanner.web) over the App's engine."""

from __future__ import annotations

import errno
import socket

import click

from lanner.commands.common import connection_options, session

LOCAL = ("127.0.0.1", "localhost", "::1")


@click.command()
@connection_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (beyond localhost: use a token).")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=8077, show_default=True,
              help="Port to listen on.")  # fmt: skip
@click.option("--token", envvar="LANNER_WEB_TOKEN", metavar="TOKEN",
              help="Secret that signs in to act (retry, cancel, pause); env LANNER_WEB_TOKEN. "
                   "Without it the dashboard is read-only.")  # fmt: skip
def web(app_path: str | None, broker: str | None, host: str, port: int, token: str | None) -> None:
    """Serve the dashboard: queues, jobs, failures, workers, statistics (docs/web.md)."""
    try:
        from lanner.web import serve
    except ImportError as error:
        raise click.ClickException(
            f"the dashboard needs the web extra: pip install 'lanner[web]' ({error})"
        ) from None
    if host not in LOCAL:
        warning = f"lanner web: listening on {host}: anyone who reaches it reads every job's data"
        click.echo(warning + ("" if token else ", and there is no token"), err=True)
    _check_port(host, port)
    with session(app_path, broker, serves=True) as app:
        mode = "token required to act" if token else "read-only: no --token"
        click.echo(f"lanner web: http://{host}:{port}/ over {app.settings.broker} ({mode})")
        serve(app.engine, host, port, token)


def _check_port(host: str, port: int) -> None:
    """A port in use is one line, before anything is opened."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            reason = "port in use" if error.errno == errno.EADDRINUSE else error.strerror
            raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None

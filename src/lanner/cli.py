"""The `lanner` command line: the subcommands live in lanner.commands (and lanner.bench)."""

from __future__ import annotations

import click

from lanner._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lanner")
def main() -> None:
    """Lanner: distributed background tasks on priority queues."""


@click.command("redis-script")
@click.option(
    "--library",
    is_flag=True,
    help="Print it as a Redis 7 function library (FUNCTION LOAD, then FCALL) instead.",
)
def redis_script(library: bool) -> None:
    """Print the Redis engine's whole Lua script (qless-compatible), for other clients.

    Run it with EVALSHA <sha> 0 <command> <now> <args...>, as qless-core's clients do.
    """
    from lanner.engines.redis.script import build_library, build_script

    click.echo(build_library() if library else build_script(), nl=False)


def _register_subcommands() -> None:
    from lanner.bench.cli import bench
    from lanner.chaos.cli import chaos
    from lanner.commands import register_admin
    from lanner.commands.demo import demo
    from lanner.commands.serve import serve
    from lanner.commands.web import web
    from lanner.commands.worker import worker
    from lanner.simulate.cli import simulate

    main.add_command(demo)
    main.add_command(worker)
    register_admin(main)
    main.add_command(bench)
    main.add_command(chaos)
    main.add_command(redis_script)
    main.add_command(serve)
    main.add_command(simulate)
    main.add_command(web)


_register_subcommands()

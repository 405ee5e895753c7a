"""The `lanner` command line: the subcommands live in lanner.commands; the tools
(`bench`, `chaos`) are loaded only when one of them is run."""

from __future__ import annotations

import importlib

import click

from lanner._version import __version__

# The tools' import path and the short help `lanner --help` shows without importing them
# (tests/unit/test_cli_lazy.py checks that each matches its command's own).
TOOL_COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("lanner.tools.bench.cli:bench", "Measure lanner's performance on this machine."),
    "chaos": (
        "lanner.tools.chaos.cli:chaos",
        "Run a real worker pool under faults; account for every job.",
    ),
}


class _Lanner(click.Group):
    """The top group: the tools' modules are imported when their command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *TOOL_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in TOOL_COMMANDS and cmd_name not in self.commands:
            module, _, name = TOOL_COMMANDS[cmd_name][0].partition(":")
            self.add_command(getattr(importlib.import_module(module), name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is None:
                rows.append((name, TOOL_COMMANDS[name][1]))
            elif not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_Lanner, context_settings={"help_option_names": ["-h", "--help"]})
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
    from lanner.commands import register_admin
    from lanner.commands.demo import demo
    from lanner.commands.serve import serve
    from lanner.commands.web import web
    from lanner.commands.worker import worker
    from lanner.simulate.cli import simulate

    main.add_command(demo)
    main.add_command(worker)
    register_admin(main)
    main.add_command(redis_script)
    main.add_command(serve)
    main.add_command(simulate)
    main.add_command(web)


_register_subcommands()

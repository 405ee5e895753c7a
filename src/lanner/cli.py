"""The `lanner` command line: one table of every command, each loaded only when it runs.

`COMMANDS` says where each command lives and what `lanner --help` shows for it, so that
`lanner --help` imports none of them and `lanner X` imports only X's module (and what it
needs): `lanner worker` does not load the dashboard, `lanner serve`'s asyncio front or the
demo. The commands live in `lanner.commands`, the tools (`bench`, `chaos`) in
`lanner.tools`; tests/unit/test_cli_lazy.py checks the table against the commands.
"""

from __future__ import annotations

import importlib

import click
from click import exceptions as click_errors

from lanner._version import __version__

# Each command: where it is ("module:attribute") and its short help, the first sentence of
# its help (`lanner --help` shortens it to the terminal's width as click would).
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("lanner.tools.bench.cli:bench", "Measure lanner's performance on this machine."),
    "cancel": (
        "lanner.commands.cancel:cancel_command",
        "Cancel the jobs JIDS: they are deleted, and a running task is stopped within about "
        "a second (JobCancelled is raised in it; its process is killed if it does not stop).",
    ),
    "chaos": (
        "lanner.tools.chaos.cli:chaos",
        "Run a real worker pool under faults; account for every job.",
    ),
    "demo": (
        "lanner.commands.demo:demo",
        "Run a worker pool on a mixed workload in a fresh SQLite database, with live progress.",
    ),
    "failed": (
        "lanner.commands.failures:failed_command",
        "The failure groups and their counts, or with GROUP the jobs of that group.",
    ),
    "flow": (
        "lanner.commands.flow:flow_command",
        "What each concurrency key and rate bucket holds back now.",
    ),
    "job": (
        "lanner.commands.inspect:job_command",
        "One job in detail: fields, progress, data, failure, history, and the graph of its "
        "workflow if it is a step of one.",
    ),
    "jobs": (
        "lanner.commands.inspect:jobs_command",
        "Jobs of QUEUE (default: every queue) in one state, in the order the engine keeps them.",
    ),
    "pause": (
        "lanner.commands.queues:pause_command",
        "Pause QUEUES: workers take none of their jobs until unpaused.",
    ),
    "publish": (
        "lanner.commands.publish:publish_command",
        "Publish a run of TASK (its dotted name) with ARGS_JSON, a JSON array; print its jid.",
    ),
    "redis-script": (
        "lanner.cli:redis_script",
        "Print the Redis engine's whole Lua script (qless-compatible), for other clients.",
    ),
    "retry": (
        "lanner.commands.failures:retry_command",
        "Put the failed jobs of GROUP back to be run again, oldest first.",
    ),
    "schedules": (
        "lanner.commands.flow:schedules_command",
        "The app's schedules (@app.periodic) with their next run, and the store's others.",
    ),
    "serve": (
        "lanner.commands.serve:serve",
        "Serve the queues over Kestrel's memcache protocol (set q 0 0 N; get q/t=500/open).",
    ),
    "simulate": (
        "lanner.simulate.cli:simulate",
        "Simulate workers running Kale's loop on a workload, before production does.",
    ),
    "stats": (
        "lanner.commands.stats:stats_command",
        "QUEUE's wait and run times on one day: histograms, mean, percentiles; failures.",
    ),
    "status": (
        "lanner.commands.inspect:status_command",
        "Every queue's job counts, and the failure groups.",
    ),
    "unpause": (
        "lanner.commands.queues:unpause_command",
        "Unpause QUEUES: workers take their jobs again.",
    ),
    "web": (
        "lanner.commands.web:web",
        "Serve the dashboard: queues, jobs, failures, workers, statistics (docs/web.md).",
    ),
    "worker": (
        "lanner.commands.worker:worker",
        "Run N worker processes under a supervisor until SIGTERM or Ctrl-C.",
    ),
}


def load_command(name: str) -> click.Command:
    """The command `name` of `COMMANDS`, its module imported now."""
    module, _, attribute = COMMANDS[name][0].partition(":")
    command: click.Command = getattr(importlib.import_module(module), attribute)
    return command


class _Lanner(click.Group):
    """The top group: a command's module is imported when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.add_command(load_command(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as error:
            # click (8.4+) suggests names close to a mistyped one among the commands it
            # holds, which are the loaded ones: offer it every name.
            no_such = getattr(click_errors, "NoSuchCommand", None)
            if no_such is None or not isinstance(error, click_errors.NoSuchCommand):
                raise
            raise click_errors.NoSuchCommand(
                error.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is None:
                # shortened as click shortens a command's own help
                listed = click.Command(name, help=COMMANDS[name][1])
                rows.append((name, listed.get_short_help_str(limit)))
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

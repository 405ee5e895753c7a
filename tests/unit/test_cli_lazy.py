"""`lanner` loads each command only when it runs: `lanner.cli.COMMANDS` names every
command's module and short help, `lanner --help` lists them without importing one, and a
command imports its own module, not the others' (the dashboard, `lanner serve`'s asyncio
front, the demo, the tools)."""

from __future__ import annotations

import ast
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from lanner import cli
from lanner.commands import cancel, failures, flow, inspect, publish, queues, stats

# What only the commands that need it may import.
HEAVY = (
    "lanner.commands.serve",
    "lanner.commands.demo",
    "lanner.commands.web",
    "lanner.kestrel",
    "lanner.web",
    "lanner.simulate",
    "lanner.tools",
    "rich",
    "yaml",  # only a queue file (--queues FILE) is read with it
)


def imported_by(args: list[str], *, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under `prefixes` that `lanner ARGS`, run in a fresh process, imports."""
    probe = (
        "import sys\n"
        "from lanner.cli import main\n"
        f"try:\n    main({args!r})\n"
        "except SystemExit as stop:\n    assert not stop.code, stop.code\n"
        f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    found: list[str] = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return found


def test_help_imports_no_command() -> None:
    assert imported_by(["--help"], prefixes=("lanner", "rich", "yaml", "asyncio")) == [
        "lanner",
        "lanner._version",
        "lanner.cli",
        "lanner.errors",
    ]


@pytest.mark.parametrize(
    "args", [["worker", "--help"], ["status", "--help"], ["redis-script", "--help"]]
)
def test_a_command_imports_none_of_the_others(args: list[str]) -> None:
    found = imported_by(args, prefixes=HEAVY)
    assert [name for name in found if not name.startswith("rich")] == []
    if args[0] != "status":  # its tables are rich's
        assert found == []


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_the_table_is_each_commands_own(name: str) -> None:
    command = cli.load_command(name)
    assert command.name == name
    assert not command.hidden
    assert command.short_help is None
    assert command.get_short_help_str(10_000) == cli.COMMANDS[name][1]
    result = CliRunner().invoke(cli.main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert cli.COMMANDS[name][1] in " ".join(result.output.split())


def test_every_admin_command_is_in_the_table() -> None:
    for module in (inspect, failures, queues, cancel, publish, stats, flow):
        for command in module.COMMANDS:
            assert command.name is not None
            assert cli.load_command(command.name) is command


def commands_section(group: click.Group, width: int) -> str:
    ctx = click.Context(group, terminal_width=width)
    formatter = ctx.make_formatter()
    group.format_commands(ctx, formatter)
    return formatter.getvalue()


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_the_help_is_the_same_with_every_command_loaded(width: int) -> None:
    """What `lanner --help` lists from the table, shortened to the terminal's width, is
    what click lists once the commands are imported."""
    listed = commands_section(cli._Lanner(), width)
    loaded = cli._Lanner()
    for name in cli.COMMANDS:
        loaded.get_command(click.Context(loaded), name)
    assert sorted(loaded.commands) == sorted(cli.COMMANDS)
    assert listed == commands_section(loaded, width)
    assert all(f"  {name}  " in listed for name in cli.COMMANDS)


def test_a_mistyped_command_is_told_its_close_names() -> None:
    """As click tells them when every command is loaded (8.4+; before, no suggestion)."""
    result = CliRunner().invoke(cli._Lanner(), ["stat"])
    assert result.exit_code == 2
    assert "No such command 'stat'." in result.output
    if hasattr(click.exceptions, "NoSuchCommand"):
        assert "Did you mean one of: 'stats', 'status'?" in result.output

"""`lanner` loads its tools (`lanner.tools`: `bench`, `chaos`) only when one of them
runs: `lanner --help` and every other command import none of them, and nothing outside
the tools and `lanner/cli.py` imports them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lanner import cli

SRC = Path(cli.__file__).resolve().parent
TOOLS = ("bench", "chaos")


def test_help_imports_no_tool_module() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from lanner.cli import main\n"
        "assert CliRunner().invoke(main, ['--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('lanner.tools')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", TOOLS)
def test_the_tools_are_in_the_table(name: str) -> None:
    """Their short help matches their own as every command's does (tests/unit/test_cli_lazy.py)."""
    assert cli.COMMANDS[name][0].startswith(f"lanner.tools.{name}.")
    result = CliRunner().invoke(cli.main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert cli.COMMANDS[name][1] in result.output


def test_nothing_else_imports_the_tools() -> None:
    importing = re.compile(r"^\s*(?:from|import)\s+lanner(?:\.tools\b|\s+import\s+tools\b)", re.M)
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "tools" not in path.relative_to(SRC).parts[:1]
        and path.name != "cli.py"
        and importing.search(path.read_text())
    ]
    assert offenders == []
    assert importing.search("from lanner.tools.bench import cli")  # the pattern sees one

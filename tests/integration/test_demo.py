"""`lanner demo`'s closing report, from a real demo run (a 2-process pool, about 5 s)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from lanner.commands.demo import run_demo

pytestmark = pytest.mark.slow


def test_the_demo_ends_with_a_readable_report_that_says_its_failures_are_on_purpose(
    tmp_path: Path,
) -> None:
    shown = io.StringIO()
    console = Console(file=shown, width=80, color_system=None)
    assert run_demo(console, directory=str(tmp_path)) is True
    lines = [line.rstrip() for line in shown.getvalue().splitlines()]
    report = lines[next(n for n, line in enumerate(lines) if line.startswith("done in")) :]
    assert max(len(line) for line in report) <= 80
    rows = {words[0]: words for words in map(str.split, report) if words}
    # Retries spent, per queue: only the jobs that fail on purpose (every 25th of 200).
    assert rows["high_priority"][2:4] == ["300/300", "0"]
    assert rows["default"][2:4] == ["200/200", "8"]
    assert rows["low_priority"][2:4] == ["50/50", "0"]
    text = " ".join(" ".join(report).split())
    assert "Failures are on purpose: IndexDocument fails the first run of every 25th" in text
    assert "to show retries; each then completes." in text
    assert "`lanner failed` lists the groups, `lanner retry GROUP` runs their jobs again." in text
    assert "{" not in text  # no Python dict, as "retried: {...}" was

"""`lanner bench chord`: a smoke run of the command, on a temporary SQLite file."""

from __future__ import annotations

import json

from click.testing import CliRunner

from lanner.cli import main


def test_a_small_chord_benchmark_runs_and_reports_every_figure() -> None:
    outcome = CliRunner().invoke(main, ["bench", "chord", "--parents", "30", "--rounds", "2",
                                        "--json"])  # fmt: skip
    assert outcome.exit_code == 0, outcome.output
    figures = json.loads(outcome.stdout)
    assert (figures["parents"], figures["rounds"]) == (30, 2)
    for name in ("publish_s", "publish_cpu_s", "last_complete_ms", "ready_ms", "inputs_ms"):
        assert len(figures["samples"][name]) == 2
        assert figures[name] >= 0
    assert len(figures["load"]) == 3

"""Tests of `lanner bench flow`: what it counts as a run (never how fast anything is)."""

from __future__ import annotations

from pathlib import Path

from lanner.tools.bench.flow import bench_in, done_jids, measure_rate


def test_a_schedules_tick_is_not_counted_among_the_other_runs(tmp_path: Path) -> None:
    # Every pool of the bench registers its schedule, so a tick may fire in any measure:
    # a rate run once counted one as a 21st start in a second limited to 20.
    with bench_in(f"sqlite:///{tmp_path}/flow.db") as bench:
        bench.out.write_text(
            "start rate j1 1 100.0\nend rate j1 1 100.1\n"
            "start tick periodic-t@60 1 100.2\nend tick periodic-t@60 1 100.3\n"
        )
        assert [line.jid for line in bench.lines()] == ["j1", "j1"]
        assert done_jids(bench) == {"j1"}
        assert {line.jid for line in bench.lines(ticks=True)} == {"periodic-t@60"}


def test_a_short_rate_run_counts_every_job(tmp_path: Path) -> None:
    result = measure_rate(f"sqlite:///{tmp_path}/rate.db", limit=5, seconds=2, pools=1,
                          processes=1)  # fmt: skip
    assert result["jobs"] == 10
    # The store holds the starts it counts to the limit; the runs' own starts follow them
    # within a slack that a loaded machine can exceed, so only the counted are bounded.
    assert 1 <= result["max_started_per_sliding_1s"] <= 10
    assert 0 < result["share_of_limit"] <= 1.0

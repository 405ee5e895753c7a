"""`lanner simulate`: tables, JSON, plots, load sweeps, scenarios from an engine, and the
one-line errors for bad scenarios and flags."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import lanner
from lanner import NewJob
from lanner.cli import main
from lanner.queues import QueueConfig
from lanner.records import TimingStats
from lanner.simulate import load_scenario
from lanner.simulate.distributions import Empirical, Fixed, LogNormal
from lanner.simulate.fromengine import (
    histogram_edges,
    run_time_from,
    scenario_from_engine,
    scenario_yaml,
)

SMALL = """
name: small
seed: 2
workers: 3
duration: 10m
measure: {start: 1m, end: 10m}
queues:
  - name: high
    priority: 100
    batch_size: 5
    long_poll_time_sec: 0.5
    arrivals: {rate: 3}
    run_time: {distribution: exponential, mean: 0.3}
  - name: low
    priority: 5
    batch_size: 5
    arrivals:
      rate: 0.5
      bursts: [{at: 5m, count: 200, over: 10s}]
    run_time: 1
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["simulate", *args], catch_exceptions=False)


def test_a_run_prints_each_queues_waits_and_the_summary(small: Path) -> None:
    result = run(str(small), "--jobs", "1")
    assert result.exit_code == 0, result.output
    for text in ("small: 3 workers; the tasks arriving 0:01-0:10", "high", "low", "p99",
                 "starved", "reduced-lottery", "mean wait", "simulated:"):  # fmt: skip
        assert text in result.output


def test_compare_runs_every_policy_and_gives_the_factor_against_static(small: Path) -> None:
    result = run(str(small), "--compare", "reduced-lottery,deficit-priority,aged-priority,static",
                 "--json", "--jobs", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)
    assert [r["policy"] for r in runs] == [
        "reduced-lottery", "deficit-priority", "aged-priority", "static"
    ]  # fmt: skip
    static = runs[3]
    assert [q["workers"] for q in static["queues"]] == [2, 1]
    assert runs[0]["queues"][0]["workers"] is None
    for r in runs:
        assert set(r["queues"][0]["wait"]) == {"mean", "p50", "p99", "max"}
        assert r["tasks"] > 1000
    table = run(str(small), "--compare", "reduced-lottery,static", "--jobs", "1").output
    assert "static ÷ this" in table
    assert "static (2)" in table


def test_overrides_change_the_workers_seed_and_duration(small: Path) -> None:
    result = run(str(small), "--workers", "5", "--seed", "9", "--duration", "20m", "--json",
                 "--jobs", "1")  # fmt: skip
    [only] = json.loads(result.stdout)
    assert (only["workers"], only["seed"]) == (5, 9)
    assert only["simulated_seconds"] > 600


def test_a_rate_sweep_prints_the_factor_against_load(small: Path, tmp_path: Path) -> None:
    plot = tmp_path / "sweep.svg"
    result = run(str(small), "--compare", "reduced-lottery,static", "--rate-scale", "0.5,1",
                 "--plot", str(plot), "--jobs", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "mean wait against load" in result.output
    assert "static ÷ reduced-lottery" in result.output
    assert plot.read_text().startswith("<?xml")
    points = json.loads(run(str(small), "--compare", "reduced-lottery,static", "--rate-scale",
                            "0.5,1", "--json", "--jobs", "1").stdout)  # fmt: skip
    assert [p["scale"] for p in points] == [0.5, 1.0]
    assert points[0]["offered_load"] == pytest.approx(points[1]["offered_load"] / 2, rel=0.01)
    assert set(points[0]["factors"]) == {"reduced-lottery"}


def test_plots_are_written_as_png_or_svg(small: Path, tmp_path: Path) -> None:
    png = tmp_path / "out.png"
    result = run(str(small), "--compare", "reduced-lottery,static", "--plot", str(png),
                 "--jobs", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"plotted to {png}" in result.output


def test_seeds_compare_policies_paired_over_seeds(small: Path) -> None:
    args = [str(small), "--compare", "reduced-lottery,highest-priority-first", "--seeds", "3",
            "--jobs", "1"]  # fmt: skip
    result = run(*args)
    assert result.exit_code == 0, result.output
    title = "highest-priority-first against reduced-lottery, paired over 3 seeds (2-4)"
    for text in (title, "lower on", "interval", "p99"):
        assert text in result.output
    stats = json.loads(run(*args, "--json").stdout)
    assert {(s["queue"], s["statistic"]) for s in stats} == {
        (q, w) for q in ("high", "low") for w in ("mean", "p99", "max")
    }
    # Each seed's pair is the runs --seed N gives, so the medians are those runs' medians.
    high_p99 = next(s for s in stats if (s["queue"], s["statistic"]) == ("high", "p99"))
    singles = [
        json.loads(run(str(small), "--compare", "reduced-lottery,highest-priority-first", "--seed",
                       str(seed), "--json", "--jobs", "1").stdout)
        for seed in (2, 3, 4)
    ]  # fmt: skip
    p99s = sorted(runs[1]["queues"][0]["wait"]["p99"] for runs in singles)
    assert high_p99["median"] == pytest.approx(p99s[1])
    ratios = [runs[1]["queues"][0]["wait"]["p99"] / runs[0]["queues"][0]["wait"]["p99"]
              for runs in singles]  # fmt: skip
    assert high_p99["lower_on"] == sum(r < 1 for r in ratios)
    low, high = high_p99["interval"]
    assert low <= high_p99["ratio"] <= high


BAD = [
    ([], "give a SCENARIO.yaml or --from-engine URL"),
    (["{small}", "--from-engine", "sqlite:///x.db"], "give a SCENARIO.yaml or --from-engine"),
    (["{small}", "--queue", "high"], "--queue goes with --from-engine"),
    (["{small}", "--compare", "reduced-lottery,fastest"], "'fastest' is not a known selector"),
    (["{small}", "--compare", "static,static"], "'static' is given twice"),
    (["{small}", "--rate-scale", "1,lots"], "--rate-scale: 'lots' is not a number > 0"),
    (["{small}", "--rate-scale", "0"], "--rate-scale: '0' is not a number > 0"),
    (["{small}", "--plot", "out.pdf"], "must end in .png or .svg"),
    (["{small}", "--duration", "30s"], "measured window ends at 600 s, after the duration"),
    (["{small}", "--duration", "never"], "'never' is not a duration"),
    (["nope.yaml"], "nope.yaml: cannot read the file"),
    (["{small}", "--seeds", "3"], "--seeds compares policies: give two or more"),
    (["{small}", "--compare", "random,static", "--seeds", "1"], "--seeds"),
    (
        ["{small}", "--compare", "random,static", "--seeds", "3", "--rate-scale", "1,2"],
        "--seeds takes one --rate-scale",
    ),
    (
        ["{small}", "--compare", "random,static", "--seeds", "3", "--plot", "x.png"],
        "--plot draws one seed's runs",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_mistakes_end_in_one_line_not_a_traceback(
    small: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["simulate", *[a.format(small=small) for a in args]])
    assert result.exit_code in (1, 2)  # click's error, or its usage error
    assert isinstance(result.exception, SystemExit)
    assert message in result.output
    assert "Traceback" not in result.output


# -- scenarios from an engine's statistics ----------------------------------------------------

DAY = datetime.datetime(2026, 3, 2, tzinfo=datetime.UTC).timestamp()


def recorded_engine(tmp_path: Path) -> str:
    """A store whose 2 March holds 40 `fast` jobs (waited 2 s, ran 3 s) and 20 `slow` ones
    (waited 1 s, ran 10 to 29 s)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    engine = lanner.open_engine(url)
    try:
        t = DAY + 3600
        engine.put_many([NewJob("fast", f"f{i}", "K") for i in range(40)], now=t)
        engine.put_many([NewJob("slow", f"s{i}", "K") for i in range(20)], now=t)
        for job in engine.pop("fast", "w", 40, now=t + 2):
            engine.complete_many([job.jid], "w", "fast", now=t + 5)
        for n, job in enumerate(engine.pop("slow", "w", 20, now=t + 1)):
            engine.complete_many([job.jid], "w", "slow", now=t + 11 + n)
    finally:
        engine.close()
    return url


def test_a_scenario_from_recorded_statistics(tmp_path: Path) -> None:
    url = recorded_engine(tmp_path)
    engine = lanner.open_engine(url)
    try:
        queues = [QueueConfig("fast", priority=10), QueueConfig("slow", priority=1)]
        scenario = scenario_from_engine(engine, queues, workers=2, duration=600, date=DAY)
    finally:
        engine.close()
    fast, slow = scenario.queues
    assert fast.arrivals.rates[0] == pytest.approx(40 / 86400)
    assert fast.run_time == Fixed(3.0)
    assert isinstance(slow.run_time, Empirical)
    assert slow.run_time.mean == pytest.approx(20.0, abs=0.5)
    again = load_scenario(_written(tmp_path, scenario_yaml(scenario)))
    assert again.queues == scenario.queues


def _written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "written.yaml"
    path.write_text(text)
    return path


def test_from_engine_on_the_command_line(tmp_path: Path) -> None:
    url = recorded_engine(tmp_path)
    out = tmp_path / "built.yaml"
    result = run("--from-engine", url, "--queue", "fast,slow", "--workers", "2",
                 "--date", "2026-03-02", "--duration", "1d",
                 "--write-scenario", str(out), "--jobs", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "fast" in result.output
    assert f"wrote the scenario to {out}" in result.output
    built = load_scenario(out)
    assert [q.name for q in built.queues] == ["fast", "slow"]  # priorities 2 and 1, in order
    assert built.workers == 2


def test_from_engine_mistakes(tmp_path: Path) -> None:
    url = recorded_engine(tmp_path)
    nothing = run("--from-engine", url, "--queue", "fast", "--workers", "1", "--date",
                  "2026-03-03")  # fmt: skip
    assert nothing.exit_code == 1
    assert "recorded no popped jobs on 2026-03-03" in nothing.output
    bad_date = CliRunner().invoke(main, ["simulate", "--from-engine", url, "--date", "March"])
    assert "--date: 'March' is not a date" in bad_date.output
    # Without --workers: as many as the engine has seen lately, and it has seen none lately.
    idle = CliRunner().invoke(main, ["simulate", "--from-engine", url, "--queue", "fast"])
    assert "the engine knows no workers; give --workers" in idle.output
    empty = CliRunner().invoke(main, ["simulate", "--from-engine", f"sqlite:///{tmp_path}/new.db"])
    assert "the engine knows no queues; name them with --queue" in empty.output


def test_run_times_from_statistics() -> None:
    empty = TimingStats(0, 0.0, 0.0, (0,) * 148)
    assert run_time_from(empty) == Fixed(1.0)
    steady = TimingStats(10, 0.4, 0.0, (10,) + (0,) * 147)
    assert run_time_from(steady) == Fixed(0.4)
    quick = TimingStats(10, 0.4, 0.2, (10,) + (0,) * 147)
    assert run_time_from(quick) == LogNormal.from_moments(0.4, 0.2)
    slow = run_time_from(
        TimingStats(4, 30.0, 20.0, (0,) * 10 + (2,) + (0,) * 49 + (2,) + (0,) * 87)
    )
    assert isinstance(slow, Empirical)
    assert slow.edges[-1] == 120.0
    edges = histogram_edges()
    assert len(edges) == 149
    assert edges[60:62] == (60.0, 120.0)
    assert edges[-1] == 7 * 86400.0

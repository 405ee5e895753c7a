"""Scenario files: the format, and one-line errors that say where a mistake is."""

from __future__ import annotations

from pathlib import Path

import pytest

from lanner.errors import ConfigError
from lanner.simulate import Window, load_scenario
from lanner.simulate.arrivals import Burst
from lanner.simulate.distributions import Empirical, Exponential, Fixed, LogNormal
from lanner.simulate.loader import parse_duration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

MINIMAL = """
workers: 3
duration: 1h
queues:
  - name: low
    priority: 1
    arrivals: {rate: 2}
    run_time: 0.5
  - name: high
    priority: 10
    batch_size: 4
    arrivals: {rate: "120/min"}
    run_time: {distribution: exponential, mean: 0.2}
"""


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_minimal_scenario_takes_defaults_and_sorts_queues_by_priority(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL))
    assert [q.name for q in scenario.queues] == ["high", "low"]
    assert scenario.name == "scenario"
    assert (scenario.workers, scenario.duration, scenario.seed) == (3, 3600.0, 0)
    assert scenario.selector == "reduced-lottery"
    assert scenario.window is None
    assert scenario.static is None
    high = scenario.queue("high")
    assert high.config.batch_size == 4
    assert high.arrivals.rates == (2.0,)
    assert high.run_time == Exponential(0.2)
    assert scenario.queue("low").run_time == Fixed(0.5)


def test_every_part_of_the_format(tmp_path: Path) -> None:
    (tmp_path / "times.csv").write_text("when,what\n100,a\n40.5,b\n\n70,c\n")
    text = """
name: everything
seed: 4
workers: 5
duration: 2h
selector: highest-priority-first
measure: {start: 30m, end: 1h30m}
static: {one: 3, two: 1}
costs: {pop_sec: 0.01, task_sec: 0.002, wake_sec: 0.05}
drain_limit: 1d
ready_cache_sec: 0
queues:
  - name: one
    priority: 5
    arrivals:
      rate: {0: 1, 1h: 3.5, 90m: "600/h"}
      bursts: [{at: 10m, count: 100, over: 1m}, {at: 20m, count: 5}]
    run_time: {distribution: lognormal, mean: 2, sigma: 0.5}
  - name: two
    priority: 1
    arrivals: {replay: {file: times.csv, origin: first}}
    run_time: {distribution: empirical, edges: [0, 1, 10], counts: [3, 1]}
"""
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.name == "everything"
    assert scenario.window == Window(1800.0, 5400.0)
    assert scenario.static == {"one": 3.0, "two": 1.0}
    assert (scenario.costs.pop_sec, scenario.costs.task_sec, scenario.costs.wake_sec) == (
        0.01, 0.002, 0.05
    )  # fmt: skip
    assert scenario.drain_limit == 86400.0
    assert scenario.ready_cache_sec == 0.0
    one, two = scenario.queues
    assert one.arrivals.changes == (0.0, 3600.0, 5400.0)
    assert one.arrivals.rates == (1.0, 3.5, 600 / 3600)
    assert one.arrivals.bursts == (Burst(600.0, 100, 60.0), Burst(1200.0, 5, 0.0))
    assert one.run_time == LogNormal(2.0, 0.5)
    assert two.arrivals.replay == (0.0, 29.5, 59.5)
    assert two.run_time == Empirical((0.0, 1.0, 10.0), (3.0, 1.0))


def test_rates_that_start_later_are_zero_before(tmp_path: Path) -> None:
    text = MINIMAL.replace("arrivals: {rate: 2}", "arrivals: {rate: {10m: 2}}")
    low = load_scenario(write(tmp_path, text)).queue("low")
    assert low.arrivals.changes == (0.0, 600.0)
    assert low.arrivals.rates == (0.0, 2.0)


def test_a_replay_alone_sets_the_duration(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("1\n2\n30\n")
    text = """
workers: 1
queues:
  - {name: q, priority: 1, arrivals: {replay: t.csv}, run_time: 1}
"""
    assert load_scenario(write(tmp_path, text)).duration == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90.0), (0.5, 0.5), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("1d", 86400.0),
     ("1h30m", 5400.0), ("250ms", 0.25), ("1.5h", 5400.0), ("10min", 600.0)],
)  # fmt: skip
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 parsecs", "h", "-3s", True, None, [1], "1h 30x"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ConfigError, match="duration"):
        parse_duration(text)


def test_the_shipped_examples_load() -> None:
    names = {path.name: load_scenario(path) for path in sorted(EXAMPLES.glob("*.yaml"))}
    assert {"busy-hour.yaml", "steady-mix.yaml", "low-burst.yaml"} <= set(names)
    busy = names["busy-hour.yaml"]
    assert [q.config.priority for q in busy.queues] == [100, 40, 5]
    assert busy.window == Window(18 * 3600.0, 19 * 3600.0)


ERRORS = [
    ("workers: 3\nduration: 1h\nqueues: []", "a scenario needs 'queues'"),
    (MINIMAL.replace("workers: 3\n", ""), "missing required field 'workers'"),
    (MINIMAL.replace("workers: 3", "wrokers: 3"), "field 'wrokers' (did you mean 'workers'?)"),
    (MINIMAL.replace("workers: 3", "workers: 0"), "workers: must be an int >= 1, not 0"),
    (MINIMAL.replace("duration: 1h", "duration: soon"), "duration: 'soon' is not a duration"),
    (MINIMAL.replace("    run_time: 0.5\n", ""), "queue 'low': missing required field 'run_time'"),
    (MINIMAL.replace("batch_size: 4", "batch_sise: 4"), "'high': unknown queue field 'batch_sise'"),
    (MINIMAL.replace("batch_size: 4", "batch_size: 0"), "'high': batch_size must be an int >= 1"),
    (MINIMAL.replace("rate: 2}", "rate: -2}"), "'low': arrivals.rate: must be a finite"),
    (MINIMAL.replace("rate: 2}", "rate: '2/fortnight'}"), "'2/fortnight' is not a rate"),
    (MINIMAL.replace("{rate: 2}", "{rates: 2}"), "queue 'low': unknown arrivals field 'rates'"),
    (MINIMAL.replace("exponential", "poisson"), "'high': run_time: distribution must"),
    (MINIMAL.replace("mean: 0.2", "mean: 0"), "queue 'high': run_time.mean: must be > 0"),
    (MINIMAL.replace("0.5", "{distribution: lognormal, mean: 1}"), "lognormal run time needs"),
    (MINIMAL + "measure: {start: 2h}\n", "measure: needs start < end <= duration"),
    (MINIMAL + "static: {nope: 1}\n", "static: names queues the scenario does not have: nope"),
    (MINIMAL + "static: evenly\n", "static: must be 'proportional' or a mapping"),
    (MINIMAL + "costs: {pop_sec: 0}\n", "costs.pop_sec: must be > 0, not 0"),
    (MINIMAL.replace("name: high", "name: low"), "queue 'low': defined twice"),
    (MINIMAL.replace("name: high", "name: 'bad name'"), "invalid queue name 'bad name'"),
    ("queues: [", "not valid YAML: line 1, column 10"),
    (MINIMAL.replace("{rate: 2}", "{replay: missing.csv}"), "cannot read"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_mistakes_are_config_errors_that_name_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_scenario(path)
    assert message in str(raised.value)
    assert str(raised.value).startswith(str(path))
    assert "\n" not in str(raised.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_scenario(tmp_path / "nope.yaml")


def test_a_replay_with_a_bad_line_says_which(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("time\n1\nlater\n")
    text = MINIMAL.replace("{rate: 2}", "{replay: t.csv}")
    with pytest.raises(ConfigError, match=r"t\.csv line 3: 'later' is not a time"):
        load_scenario(write(tmp_path, text))

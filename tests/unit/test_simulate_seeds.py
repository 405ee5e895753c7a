"""Paired comparisons over seeds: the jobs, the grouping, the ratio and its interval."""

from __future__ import annotations

import math

import pytest
import yaml

from lanner.simulate import RunResult, Scenario, WaitSummary, Window, parse_scenario
from lanner.simulate.results import DepthSeries, QueueResult
from lanner.simulate.seeds import paired_stats, seed_jobs

SCENARIO = """
name: two
seed: 5
workers: 2
duration: 1m
queues:
  - {name: a, priority: 10, arrivals: {rate: 1}, run_time: 0.1}
"""


def scenario() -> Scenario:
    return parse_scenario(yaml.safe_load(SCENARIO), "two.yaml")


def result(policy: str, seed: int, p99: float, maximum: float) -> RunResult:
    wait = WaitSummary(count=10, mean=p99 / 2, p50=p99 / 4, p99=p99, max=maximum)
    queue = QueueResult(name="a", priority=10, workers=None, wait=wait, throughput=1.0,
                        starvation=0.0, busy_share=0.1, empty_polls=0, unserved=0)  # fmt: skip
    return RunResult(scenario="two", policy=policy, workers=2, seed=seed, window=Window(0, 60),
                     offered_load=0.1, queues=(queue,), utilisation=0.1, tasks=60,
                     simulated=60.0, elapsed=0.01, depth=DepthSeries((), {}))  # fmt: skip


def test_every_policy_runs_on_each_seed_from_the_scenarios() -> None:
    jobs = seed_jobs(scenario(), ["x", "y"], 3)
    assert [(j.scenario.seed, j.policy) for j in jobs] == [
        (5, "x"), (5, "y"), (6, "x"), (6, "y"), (7, "x"), (7, "y"),
    ]  # fmt: skip


def test_the_ratio_is_the_geometric_mean_of_the_per_seed_ratios() -> None:
    # y's p99 is half of x's on one seed and twice on the other: no difference overall.
    results = [result("x", 5, 1.0, 2.0), result("y", 5, 0.5, 1.0),
               result("x", 6, 1.0, 4.0), result("y", 6, 2.0, 1.0)]  # fmt: skip
    stats = {s.statistic: s for s in paired_stats(results, ["x", "y"], 2)}
    p99 = stats["p99"]
    assert (p99.policy, p99.reference, p99.seeds) == ("y", "x", 2)
    assert p99.ratio == pytest.approx(1.0)
    assert (p99.reference_median, p99.median, p99.lower_on) == (1.0, 1.25, 1)
    assert stats["max"].ratio == pytest.approx(math.sqrt(0.5 * 0.25))
    assert stats["max"].lower_on == 2
    assert p99.low == pytest.approx(0.5)
    assert p99.high == pytest.approx(2.0)


def test_a_steady_ratio_has_a_narrow_interval_and_a_zero_has_none() -> None:
    results = []
    for seed in range(5, 25):
        results += [result("x", seed, 1.0 + seed / 100, 3.0), result("y", seed, 0.9, 0.0)]
    stats = {s.statistic: s for s in paired_stats(results, ["x", "y"], 20)}
    p99 = stats["p99"]
    assert p99.low is not None
    assert p99.high is not None
    assert p99.ratio is not None
    assert p99.low < p99.ratio < p99.high < 1.0
    assert p99.lower_on == 20
    assert (stats["max"].ratio, stats["max"].low) == (None, None)
    assert stats["max"].to_json()["interval"] is None


def test_results_must_match_the_jobs() -> None:
    with pytest.raises(ValueError, match="expected 4 results, got 3"):
        paired_stats([result("x", 5, 1, 1)] * 3, ["x", "y"], 2)

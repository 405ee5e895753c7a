"""What a simulation is fed: run-time distributions, arrival streams, scenario arithmetic.

Statistical checks use fixed seeds and a tolerance of 5 standard errors, so they cannot flake
and still fail by dozens of standard errors when a mean or a rate is wrong.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from lanner.errors import ConfigError
from lanner.queues import QueueConfig
from lanner.simulate import Scenario, SimQueue, Window
from lanner.simulate.arrivals import GRID_SEC, ArrivalSpec, ArrivalStream, Burst
from lanner.simulate.distributions import Empirical, Exponential, Fixed, LogNormal, RunTime

N = 20_000


def totals(run_time: RunTime, n: int, draws: int = N, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [run_time.total(rng, n) for _ in range(draws)]


@pytest.mark.parametrize(
    "run_time",
    [Fixed(0.3), Exponential(0.5), LogNormal(2.0, 0.8), Empirical((0, 1, 3), (1, 1))],
    ids=["fixed", "exponential", "lognormal", "empirical"],
)
@pytest.mark.parametrize("batch", [1, 10])
def test_a_batch_runs_batch_times_the_mean_on_average(run_time: RunTime, batch: int) -> None:
    drawn = totals(run_time, batch)
    error = statistics.stdev(drawn) / math.sqrt(len(drawn)) if run_time.mean != 0.3 else 1e-12
    assert statistics.fmean(drawn) == pytest.approx(batch * run_time.mean, abs=5 * error + 1e-9)


@pytest.mark.parametrize(
    "run_time",
    [Exponential(0.5), LogNormal(2.0, 0.8), Empirical((0, 1, 3), (1, 1))],
    ids=["exponential", "lognormal", "empirical"],
)
def test_a_tasks_run_time_does_not_depend_on_how_tasks_are_batched(run_time: RunTime) -> None:
    one_batch = run_time.total(random.Random(7), 6)
    rng = random.Random(7)
    in_three = [run_time.total(rng, n) for n in (1, 3, 2)]
    assert math.fsum(in_three) == pytest.approx(one_batch, rel=1e-12)


def test_the_empirical_mean_is_the_buckets_midpoints_weighted() -> None:
    assert Empirical((0, 1, 3), (1, 1)).mean == pytest.approx((0.5 + 2) / 2)
    assert Empirical((0, 2), (5,)).mean == 1.0


def test_empirical_draws_stay_in_their_buckets_and_skip_empty_ones() -> None:
    histogram = Empirical((0, 1, 2, 3), (1, 0, 1))
    drawn = totals(histogram, 1, draws=2000)
    assert all(0 <= d < 1 or 2 <= d < 3 for d in drawn)


def test_a_lognormal_from_moments_has_those_moments() -> None:
    spread = LogNormal.from_moments(2.0, 3.0)
    drawn = totals(spread, 1, draws=200_000)
    assert statistics.fmean(drawn) == pytest.approx(2.0, rel=0.03)
    assert statistics.stdev(drawn) == pytest.approx(3.0, rel=0.15)


def test_every_distribution_describes_itself() -> None:
    assert Fixed(0.5).describe() == "fixed 0.5 s"
    assert "mean 2 s" in LogNormal(2.0, 1.0).describe()
    assert "exponential" in Exponential(1).describe()
    assert "2 buckets" in Empirical((0, 1, 3), (1, 1)).describe()


# -- arrivals --------------------------------------------------------------------------------


def stream(spec: ArrivalSpec, end: float = 3600.0, seed: int = 7) -> ArrivalStream:
    return ArrivalStream(spec, random.Random(seed), end)


def everything(arrivals: ArrivalStream, end: float) -> list[float]:
    drawn: list[float] = []
    while not arrivals.done:
        drawn += arrivals.window(arrivals.reached + 1)
    return drawn


def test_poisson_arrivals_come_at_the_rate_and_in_order() -> None:
    spec = ArrivalSpec(rates=(5.0,))
    drawn = everything(stream(spec), 3600)
    assert len(drawn) == pytest.approx(18_000, abs=5 * math.sqrt(18_000))
    assert drawn == sorted(drawn)
    assert drawn[0] >= 0
    assert drawn[-1] < 3600


def test_rates_change_at_the_given_times() -> None:
    spec = ArrivalSpec(changes=(0.0, 1800.0), rates=(1.0, 10.0))
    drawn = everything(stream(spec), 3600)
    early = sum(1 for t in drawn if t < 1800)
    assert early == pytest.approx(1800, abs=5 * math.sqrt(1800))
    assert len(drawn) - early == pytest.approx(18_000, abs=5 * math.sqrt(18_000))
    assert spec.expected(0, 3600) == pytest.approx(19_800)
    assert spec.expected(1000, 2000) == pytest.approx(800 + 2000)
    assert spec.rate_at(1799) == 1.0
    assert spec.rate_at(1800) == 10.0


def test_what_is_drawn_does_not_depend_on_how_it_is_asked_for() -> None:
    spec = ArrivalSpec(changes=(0.0, 100.0), rates=(3.0, 8.0), bursts=(Burst(50, 100, 10),))
    in_one = stream(spec).window(3600)
    sliced = stream(spec)
    pieces: list[float] = []
    for until in (0.5, 59.9, 60.0, 61.0, 250.0, 1234.5, 3600.0):
        pieces += sliced.window(until)
    assert pieces == in_one
    assert sliced.done
    assert sliced.reached == 3600.0
    assert GRID_SEC == 60.0


def test_bursts_add_their_count_within_their_span() -> None:
    spec = ArrivalSpec(bursts=(Burst(at=100.0, count=500, over=20.0), Burst(at=300.0, count=3)))
    drawn = everything(stream(spec), 3600)
    assert len(drawn) == 503
    assert all(100 <= t < 120 for t in drawn[:500])
    assert drawn[500:] == [300.0, 300.0, 300.0]
    assert spec.expected(100, 110) == pytest.approx(250)


def test_a_replay_is_replayed_as_is_within_the_run() -> None:
    spec = ArrivalSpec(replay=(0.0, 1.5, 1.5, 7.0, 4000.0))
    assert everything(stream(spec, end=3600), 3600) == [0.0, 1.5, 1.5, 7.0]
    assert spec.expected(0, 2) == 3


def test_scaling_multiplies_rates_and_bursts_but_not_replays() -> None:
    spec = ArrivalSpec(rates=(2.0,), bursts=(Burst(0, 10),), replay=(1.0,)).scaled(1.5)
    assert spec.rates == (3.0,)
    assert spec.bursts[0].count == 15
    assert spec.replay == (1.0,)


# -- scenarios -------------------------------------------------------------------------------


def mix(static: dict[str, float] | None = None, workers: int = 10) -> Scenario:
    queues = (
        SimQueue(QueueConfig("a", priority=3), ArrivalSpec(rates=(2.0,)), Fixed(2.0)),  # 4
        SimQueue(QueueConfig("b", priority=2), ArrivalSpec(rates=(1.0,)), Fixed(1.0)),  # 1
        SimQueue(QueueConfig("c", priority=1), ArrivalSpec(rates=(0.01,)), Fixed(1.0)),
    )
    return Scenario("mix", queues, workers=workers, duration=100.0, static=static)


def test_offered_load_is_arrivals_times_mean_run_time() -> None:
    assert mix().offered_load() == pytest.approx({"a": 4.0, "b": 1.0, "c": 0.01})
    assert mix().utilisation_offered() == pytest.approx(5.01 / 10)
    assert mix().offered_load(Window(0, 50)) == mix().offered_load()


def test_static_workers_follow_the_load_and_every_queue_gets_one() -> None:
    # Ideal 7.98, 2.0 and 0.02 workers: rounded 8, 2, 0; `c` takes one of `a`'s.
    assert mix().static_workers() == {"a": 7, "b": 2, "c": 1}
    assert mix(workers=3).static_workers() == {"a": 1, "b": 1, "c": 1}
    assert mix(static={"a": 1, "b": 1, "c": 2}, workers=8).static_workers() == {
        "a": 2, "b": 2, "c": 4
    }  # fmt: skip


def test_static_needs_a_worker_per_queue() -> None:
    with pytest.raises(ConfigError, match="at least one worker per queue: 2 workers for 3"):
        mix(workers=2).static_workers()


def test_overrides_keep_what_is_not_given_and_check_the_window() -> None:
    changed = mix().with_overrides(workers=4, seed=9)
    assert (changed.workers, changed.seed, changed.duration) == (4, 9, 100.0)
    windowed = Scenario("w", mix().queues, workers=1, duration=100, window=Window(10, 90))
    with pytest.raises(ConfigError, match="measured window ends at 90 s, after the duration"):
        windowed.with_overrides(duration=50)
    assert mix().scaled(2).offered_load()["a"] == pytest.approx(8.0)

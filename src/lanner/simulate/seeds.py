"""Comparing policies over many seeds, paired: `lanner simulate --compare A,B --seeds N`.

A maximum wait is one task, and which task waits longest depends on when every worker's
rounds happen to end, so one seed's comparison of two policies says little about their
maxima (or a short run's p99). Here each policy runs the same N seeds; on each seed both
see the same tasks (common random numbers), so the per-seed ratio policy / reference
cancels most of the luck the two share. Per queue and statistic, the result is the median
of each side, the geometric mean of the per-seed ratios with a 95 % bootstrap interval,
and on how many seeds the policy came out lower.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from lanner.simulate.results import RunResult, WaitSummary
from lanner.simulate.runner import Job
from lanner.simulate.scenario import Scenario

__all__ = ["STATISTICS", "PairedStat", "paired_stats", "seed_jobs"]

STATISTICS: Final = ("mean", "p99", "max")
_RESAMPLES: Final = 2000
_CONFIDENCE: Final = 0.95


@dataclass(frozen=True, slots=True)
class PairedStat:
    """One queue's `statistic` of its waits, `policy` against `reference`, over `seeds`."""

    queue: str
    statistic: str
    policy: str
    reference: str
    seeds: int
    reference_median: float
    median: float
    ratio: float | None
    """Geometric mean of policy / reference over the seeds; None if a value was 0."""
    low: float | None
    high: float | None
    """The ratio's 95 % bootstrap interval."""
    lower_on: int
    """Seeds on which the policy's value was lower than the reference's."""

    def to_json(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "statistic": self.statistic,
            "policy": self.policy,
            "reference": self.reference,
            "seeds": self.seeds,
            "reference_median": self.reference_median,
            "median": self.median,
            "ratio": self.ratio,
            "interval": None if self.low is None else [self.low, self.high],
            "lower_on": self.lower_on,
        }


def seed_jobs(scenario: Scenario, policies: Sequence[str], count: int) -> list[Job]:
    """Every policy on the scenario's seed and the `count - 1` seeds after it, seed-major."""
    return [
        Job(scenario.with_overrides(seed=scenario.seed + n), policy)
        for n in range(count)
        for policy in policies
    ]


def paired_stats(
    results: Sequence[RunResult], policies: Sequence[str], count: int
) -> list[PairedStat]:
    """Group the results of `seed_jobs`: each policy after the first against the first."""
    if len(results) != count * len(policies):
        raise ValueError(f"expected {count * len(policies)} results, got {len(results)}")
    runs = {
        policy: [results[n * len(policies) + i] for n in range(count)]
        for i, policy in enumerate(policies)
    }
    reference, others = policies[0], policies[1:]
    stats = []
    for queue in (q.name for q in results[0].queues):
        for statistic in STATISTICS:
            base = [_value(run, queue, statistic) for run in runs[reference]]
            for policy in others:
                values = [_value(run, queue, statistic) for run in runs[policy]]
                stats.append(_compare(queue, statistic, policy, reference, values, base))
    return stats


def _value(run: RunResult, queue: str, statistic: str) -> float:
    wait: WaitSummary = run.queue(queue).wait
    value: float = getattr(wait, statistic)
    return value


def _compare(
    queue: str,
    statistic: str,
    policy: str,
    reference: str,
    values: list[float],
    base: list[float],
) -> PairedStat:
    ratio = low = high = None
    if all(v > 0 for v in values) and all(b > 0 for b in base):
        logs = [math.log(v / b) for v, b in zip(values, base, strict=True)]
        ratio = math.exp(statistics.fmean(logs))
        low, high = _interval(logs)
    return PairedStat(
        queue=queue,
        statistic=statistic,
        policy=policy,
        reference=reference,
        seeds=len(values),
        reference_median=statistics.median(base),
        median=statistics.median(values),
        ratio=ratio,
        low=low,
        high=high,
        lower_on=sum(v < b for v, b in zip(values, base, strict=True)),
    )


def _interval(logs: list[float]) -> tuple[float, float]:
    """A percentile bootstrap of the mean log ratio; a fixed seed keeps reports repeatable."""
    rng = random.Random(0)
    n = len(logs)
    means = sorted(statistics.fmean(rng.choices(logs, k=n)) for _ in range(_RESAMPLES))
    tail = (1 - _CONFIDENCE) / 2
    return (
        math.exp(means[int(tail * _RESAMPLES)]),
        math.exp(means[math.ceil((1 - tail) * _RESAMPLES) - 1]),
    )

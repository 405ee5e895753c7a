"""Comparing policies, and the same comparison over a range of loads.

The headline number of a comparison is the factor by which a selector cuts the average
task-in-queue wait against the static baseline: static's mean wait ÷ the selector's. A
sweep repeats the comparison with every arrival rate multiplied by each of several scales,
which draws that factor against load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lanner.simulate.results import RunResult
from lanner.simulate.runner import Job
from lanner.simulate.scenario import STATIC, Scenario

__all__ = ["SweepPoint", "at_scale", "factor", "sweep_jobs", "sweep_points"]


def factor(baseline: RunResult, other: RunResult) -> float:
    """How many times shorter `other`'s average wait is than `baseline`'s."""
    if other.mean_wait == 0:
        return math.inf if baseline.mean_wait > 0 else 1.0
    return baseline.mean_wait / other.mean_wait


@dataclass(frozen=True, slots=True)
class SweepPoint:
    scale: float
    offered_load: float
    """Demand in the measured window as a fraction of the workers' capacity."""
    results: Mapping[str, RunResult]

    def factor(self, policy: str) -> float | None:
        """Static's mean wait ÷ `policy`'s, if static was simulated."""
        if STATIC not in self.results or policy == STATIC:
            return None
        return factor(self.results[STATIC], self.results[policy])


def at_scale(scenario: Scenario, scale: float) -> Scenario:
    """The scenario with its rates times `scale`. The static layout stays the one sized for
    scale 1, as a fleet is laid out once and then lives through heavier and lighter days."""
    layout = scenario.static if scenario.static is not None else scenario.offered_load()
    return scenario.scaled(scale).with_static(layout)


def sweep_jobs(scenario: Scenario, policies: Sequence[str], scales: Sequence[float]) -> list[Job]:
    """One job per (scale, policy)."""
    return [Job(at_scale(scenario, scale), policy) for scale in scales for policy in policies]


def sweep_points(
    scenario: Scenario, policies: Sequence[str], scales: Sequence[float], results: list[RunResult]
) -> list[SweepPoint]:
    """Group the results of `sweep_jobs` by scale."""
    points = []
    for n, scale in enumerate(scales):
        chunk = results[n * len(policies) : (n + 1) * len(policies)]
        load = scenario.scaled(scale).utilisation_offered(scenario.window)
        points.append(SweepPoint(scale, load, dict(zip(policies, chunk, strict=True))))
    return points

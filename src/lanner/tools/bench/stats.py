"""Summary statistics of benchmark samples: percentiles of a list of durations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0 ≤ q ≤ 100) of `values`, linearly interpolated between ranks.

    This is numpy's default ("linear") method, so numbers compare with other tools' output.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be between 0 and 100, not {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50, p95, p99 and the maximum of a sample, in the sample's unit."""

    p50: float
    p95: float
    p99: float
    max: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float], *, scale: float = 1.0) -> Percentiles:
        """Summarize `values`, each multiplied by `scale` (e.g. 1000 for seconds to ms)."""
        scaled = [value * scale for value in values]
        return cls(
            p50=percentile(scaled, 50),
            p95=percentile(scaled, 95),
            p99=percentile(scaled, 99),
            max=max(scaled),
            count=len(scaled),
        )

    def as_dict(self) -> dict[str, float]:
        return {"p50": self.p50, "p95": self.p95, "p99": self.p99, "max": self.max}

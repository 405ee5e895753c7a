"""Run-time distributions of simulated tasks: fixed, exponential, lognormal, empirical.

Each distribution knows its mean (for static assignment and offered load) and draws the
total run time of a batch of `n` tasks in one call, which is what the simulator needs: a
worker runs a popped batch back to back, so only the batch's total moves the clock. The
total is always one draw per task, in order, from the queue's own random stream: since a
queue is popped in arrival order, its k-th task runs as long under every policy however the
batches fall (common random numbers, so that policies are compared on the same work).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Empirical", "Exponential", "Fixed", "LogNormal", "RunTime"]


class RunTime(Protocol):
    """How long tasks of one queue run."""

    @property
    def mean(self) -> float: ...

    def total(self, rng: random.Random, n: int) -> float:
        """The summed run time of `n` tasks (n >= 1)."""
        ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Fixed:
    seconds: float

    @property
    def mean(self) -> float:
        return self.seconds

    def total(self, rng: random.Random, n: int) -> float:
        return self.seconds * n

    def describe(self) -> str:
        return f"fixed {self.seconds:g} s"


@dataclass(frozen=True, slots=True)
class Exponential:
    mean_seconds: float

    @property
    def mean(self) -> float:
        return self.mean_seconds

    def total(self, rng: random.Random, n: int) -> float:
        draw, rate = rng.expovariate, 1.0 / self.mean_seconds
        if n == 1:
            return draw(rate)
        return math.fsum(draw(rate) for _ in range(n))

    def describe(self) -> str:
        return f"exponential, mean {self.mean_seconds:g} s"


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Parameterised by its mean (seconds) and sigma, the spread of the log of a run time."""

    mean_seconds: float
    sigma: float
    _mu: float = field(init=False, repr=False, compare=False)

    @property
    def mean(self) -> float:
        return self.mean_seconds

    @property
    def mu(self) -> float:
        return self._mu

    def __post_init__(self) -> None:
        object.__setattr__(self, "_mu", math.log(self.mean_seconds) - self.sigma**2 / 2)

    def total(self, rng: random.Random, n: int) -> float:
        mu, sigma = self.mu, self.sigma
        draw = rng.lognormvariate
        if n == 1:
            return draw(mu, sigma)
        return math.fsum(draw(mu, sigma) for _ in range(n))

    def describe(self) -> str:
        return f"lognormal, mean {self.mean_seconds:g} s, sigma {self.sigma:g}"

    @classmethod
    def from_moments(cls, mean: float, std: float) -> LogNormal:
        """The lognormal with this mean and standard deviation."""
        return cls(mean, math.sqrt(math.log1p((std / mean) ** 2)))


@dataclass(frozen=True, slots=True)
class Empirical:
    """A histogram: `counts[i]` run times fell in [edges[i], edges[i+1]); uniform within."""

    edges: tuple[float, ...]
    counts: tuple[float, ...]
    cumulative: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cumulative", tuple(itertools.accumulate(self.counts)))

    @property
    def mean(self) -> float:
        weighted = sum(
            count * (low + high) / 2
            for count, low, high in zip(self.counts, self.edges, self.edges[1:], strict=False)
        )
        return weighted / sum(self.counts)

    def total(self, rng: random.Random, n: int) -> float:
        cumulative, edges = self.cumulative, self.edges
        last = cumulative[-1]
        total = 0.0
        for _ in range(n):
            index = bisect.bisect_right(cumulative, rng.random() * last)
            low = edges[index]
            total += low + (edges[index + 1] - low) * rng.random()
        return total

    def describe(self) -> str:
        return f"empirical, {len(self.counts)} buckets, mean {self.mean:.3g} s"

"""When tasks arrive in a simulated queue: Poisson with a rate that varies over time, bursts,
and timestamps replayed from a file, in any combination.

An `ArrivalSpec` is the description (from a scenario); an `ArrivalStream` draws the actual
times, a window at a time, so that a simulated day of millions of tasks never has to sit in
memory at once. Rates change at given moments and stay constant in between; since the
Poisson process is memoryless, drawing restarts at each change and at each window's end.
Windows end on a fixed grid, so what is drawn never depends on how the simulation asks.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field, replace
from typing import Final

__all__ = ["GRID_SEC", "ArrivalSpec", "ArrivalStream", "Burst"]

GRID_SEC: Final = 60.0
"""Arrivals are drawn a whole number of these seconds at a time."""


@dataclass(frozen=True, slots=True)
class Burst:
    """`count` extra tasks spread uniformly over [at, at + over) (all at `at` if over is 0)."""

    at: float
    count: int
    over: float = 0.0


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    """Rates in tasks per second: `rates[i]` holds from `changes[i]` to the next change.

    `changes` starts at 0 and increases. `replay` holds timestamps (seconds from the start).
    """

    changes: tuple[float, ...] = (0.0,)
    rates: tuple[float, ...] = (0.0,)
    bursts: tuple[Burst, ...] = ()
    replay: tuple[float, ...] = field(default=(), repr=False)

    def scaled(self, factor: float) -> ArrivalSpec:
        """The same shape with `factor` times the Poisson rates and burst sizes (a replay is
        replayed as it is)."""
        return replace(
            self,
            rates=tuple(rate * factor for rate in self.rates),
            bursts=tuple(replace(b, count=round(b.count * factor)) for b in self.bursts),
        )

    def expected(self, start: float, end: float) -> float:
        """The expected number of arrivals in [start, end)."""
        total = 0.0
        bounds = [*self.changes[1:], math.inf]
        for begin, stop, rate in zip(self.changes, bounds, self.rates, strict=True):
            overlap = min(stop, end) - max(begin, start)
            if overlap > 0:
                total += rate * overlap
        for burst in self.bursts:
            total += burst.count * _overlap_share(burst, start, end)
        low = bisect.bisect_left(self.replay, start)
        return total + bisect.bisect_left(self.replay, end) - low

    def rate_at(self, when: float) -> float:
        return self.rates[bisect.bisect_right(self.changes, when) - 1]


def _overlap_share(burst: Burst, start: float, end: float) -> float:
    if burst.over == 0:
        return 1.0 if start <= burst.at < end else 0.0
    overlap = min(end, burst.at + burst.over) - max(start, burst.at)
    return max(0.0, overlap) / burst.over


class ArrivalStream:
    """Draws the arrival times of one queue in [0, end), one window after another."""

    def __init__(self, spec: ArrivalSpec, rng: random.Random, end: float) -> None:
        self._changes = spec.changes
        self._rates = spec.rates
        self._rng = rng
        self._end = end
        self._at = 0.0  # every Poisson arrival before this has been drawn
        self._segment = 0
        extra = [time for time in spec.replay if 0 <= time < end]
        for burst in spec.bursts:
            extra.extend(burst.at + burst.over * rng.random() for _ in range(burst.count))
        self._extra = sorted(time for time in extra if time < end)

    @property
    def done(self) -> bool:
        return self._at >= self._end

    @property
    def reached(self) -> float:
        """Every arrival before this time has been drawn."""
        return self._at

    def window(self, until: float) -> list[float]:
        """The sorted arrival times from the end of the previous window to `until` or a little
        past it: windows end on a fixed grid, so the times drawn do not depend on how the
        caller slices them (two policies simulated with one seed see the same arrivals)."""
        start = self._at
        stop = min(math.ceil(until / GRID_SEC) * GRID_SEC, self._end)
        if stop <= start:
            return []
        drawn = self._poisson(stop)
        extra = self._extra
        low, high = bisect.bisect_left(extra, start), bisect.bisect_left(extra, stop)
        if high > low:
            drawn = sorted(drawn + extra[low:high])
        return drawn

    def _poisson(self, stop: float) -> list[float]:
        drawn: list[float] = []
        append, uniform, log = drawn.append, self._rng.random, math.log
        changes, rates = self._changes, self._rates
        at, segment = self._at, self._segment
        while at < stop:
            segment_end = changes[segment + 1] if segment + 1 < len(changes) else math.inf
            # Draws restart on every grid line, however many lines a window spans.
            limit = min(segment_end, stop, (math.floor(at / GRID_SEC) + 1) * GRID_SEC)
            rate = rates[segment]
            if rate > 0:
                scale = 1.0 / rate
                while True:
                    at -= log(1.0 - uniform()) * scale
                    if at >= limit:
                        break
                    append(at)
            at = limit
            if at >= segment_end:
                segment += 1
        self._at, self._segment = at, segment
        return drawn

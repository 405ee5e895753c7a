"""qless's timing histograms (`TimingStats.histogram`): bucket bounds, labels, percentiles.

A histogram has 148 buckets, as qless-core reports them: 60 of one second (0 s to 60 s),
59 of one minute (1 min to 60 min), 23 of one hour (1 h to 24 h), 6 of one day (1 d to
7 d). A duration of 7 days or more is counted in the timing's mean but in no bucket.
Pure functions, no engine: `lanner stats` and the web dashboard both use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Final

__all__ = [
    "BUCKETS",
    "bucket_bounds",
    "bucket_index",
    "bucket_label",
    "duration",
    "percentile",
]

MINUTE: Final = 60
HOUR: Final = 3600
DAY: Final = 86400

_LAYOUT: Final = (  # (unit in seconds, its suffix, the first multiple, the last)
    (1, "s", 0, 59),
    (MINUTE, "m", 1, 59),
    (HOUR, "h", 1, 23),
    (DAY, "d", 1, 6),
)
BUCKETS: Final = sum(last - first + 1 for _, _, first, last in _LAYOUT)  # 148


@cache
def _table() -> tuple[tuple[float, float, str], ...]:
    return tuple(
        (float(multiple * unit), float((multiple + 1) * unit), f"{multiple}{suffix}")
        for unit, suffix, first, last in _LAYOUT
        for multiple in range(first, last + 1)
    )


def bucket_bounds() -> tuple[tuple[float, float], ...]:
    """Each bucket's [low, high) bounds in seconds, in histogram order (148 pairs)."""
    return tuple((low, high) for low, high, _ in _table())


def bucket_label(index: int) -> str:
    """A bucket named by its lower bound in its own unit: "3s", "12m", "2h", "1d"."""
    return _table()[index][2]


def bucket_index(seconds: float) -> int | None:
    """The bucket a duration falls in (as the engines count it); None from 7 days on."""
    seconds = max(0.0, seconds)
    offset = 0
    for unit, _, first, last in _LAYOUT:
        multiple = int(seconds // unit)
        if multiple <= last:
            return offset + multiple - first
        offset += last - first + 1
    return None


def percentile(histogram: Sequence[int], p: float) -> float:
    """The p-th percentile (0 to 100) of the durations a histogram counts, in seconds.

    Approximate: the durations of a bucket are taken as spread evenly over it, so the
    answer is interpolated inside the bucket the rank falls in (its error is at most that
    bucket's width: a second, a minute, an hour or a day). Durations of 7 days or more are
    in no bucket, so they are left out. 0.0 for an empty histogram.
    """
    if not 0 <= p <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {p!r}")
    if len(histogram) != BUCKETS:
        raise ValueError(f"a histogram has {BUCKETS} buckets, not {len(histogram)}")
    total = sum(histogram)
    if total <= 0:
        return 0.0
    rank = p / 100 * total
    seen = 0
    for (low, high), count in zip(bucket_bounds(), histogram, strict=True):
        if count <= 0:
            continue
        if seen + count >= rank:
            return low + (high - low) * max(0.0, rank - seen) / count
        seen += count
    return bucket_bounds()[-1][1]  # not reached: rank <= total


def duration(seconds: float) -> str:
    """A duration in a human unit: "0.25s", "12.5s", "3.2m", "2.0h", "1.5d"."""
    if seconds < MINUTE:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    if seconds < HOUR:
        return f"{seconds / MINUTE:.1f}m"
    if seconds < DAY:
        return f"{seconds / HOUR:.1f}h"
    return f"{seconds / DAY:.1f}d"

"""Per-day queue statistics of the SQLite engine: recording and reading them.

Timings are merged a batch at a time (Chan's parallel form of Welford's algorithm), so a
pop or completion of many jobs costs one row update per day and queue, not one per job.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final, Literal

from lanner.records import QueueStats, TimingStats

HISTOGRAM_BUCKETS: Final = 148
DAY: Final = 86400

Kind = Literal["wait", "run"]
Counter_ = Literal["failures", "failed", "retries"]


def day_of(when: float) -> int:
    return int(when - when % DAY)


def bucket(seconds: float) -> int | None:
    """The histogram bucket of a duration: 60 seconds, 59 minutes, 23 hours, 6 days."""
    if seconds < 60:
        return max(0, int(seconds))
    if seconds < 3600:
        return 59 + int(seconds // 60)
    if seconds < DAY:
        return 118 + int(seconds // 3600)
    days = int(seconds // DAY)
    return 141 + days if days <= 6 else None


def record_timings(
    conn: sqlite3.Connection, kind: Kind, queue: str, when: float, durations: Sequence[float]
) -> None:
    """Add durations (seconds) measured at `when` to the timings of that day and queue."""
    if not durations:
        return
    day = day_of(when)
    values = [max(0.0, value) for value in durations]
    mean = math.fsum(values) / len(values)
    vk = math.fsum((value - mean) ** 2 for value in values)
    conn.execute(
        "INSERT INTO timings VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
        "count = count + excluded.count, "
        "mean = mean + (excluded.mean - mean) * excluded.count / (count + excluded.count), "
        "vk = vk + excluded.vk + (excluded.mean - mean) * (excluded.mean - mean) "
        "     * count * excluded.count / (count + excluded.count)",
        (day, queue, kind, len(values), mean, vk),
    )
    buckets = Counter(map(bucket, values))
    buckets.pop(None, None)
    conn.executemany(
        "INSERT INTO histograms VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO UPDATE SET count = count + excluded.count",
        [(day, queue, kind, index, n) for index, n in buckets.items()],
    )


def count(conn: sqlite3.Connection, field: Counter_, events: Iterable[tuple[str, float]]) -> None:
    """Add 1 to `field` of the day of each (queue, when) event."""
    totals: Counter[tuple[int, str]] = Counter(
        (day_of(when), queue) for queue, when in events if queue
    )
    _add(conn, field, totals)


def uncount_failed(conn: sqlite3.Connection, failures: Iterable[tuple[str, float]]) -> None:
    """Jobs that failed (queue, when) are failed no more."""
    totals: Counter[tuple[int, str]] = Counter()
    for queue, when in failures:
        if queue:
            totals[day_of(when), queue] -= 1
    _add(conn, "failed", totals)


def _add(conn: sqlite3.Connection, field: Counter_, totals: Counter[tuple[int, str]]) -> None:
    rows = [(day, queue, n) for (day, queue), n in totals.items() if n]
    if not rows:
        return  # most puts uncount nothing: no statement at all
    # `field` is one of three literals, never user input.
    conn.executemany(
        f"INSERT INTO daily (day, queue, {field}) VALUES (?, ?, ?) "
        f"ON CONFLICT DO UPDATE SET {field} = {field} + excluded.{field}",
        rows,
    )


def read(conn: sqlite3.Connection, queue: str, date: float) -> QueueStats:
    day = day_of(date)
    counters = conn.execute(
        "SELECT failures, failed, retries FROM daily WHERE day = ? AND queue = ?", (day, queue)
    ).fetchone() or (0, 0, 0)
    return QueueStats(
        retries=counters[2],
        failed=counters[1],
        failures=counters[0],
        wait=_timing(conn, day, queue, "wait"),
        run=_timing(conn, day, queue, "run"),
    )


def _timing(conn: sqlite3.Connection, day: int, queue: str, kind: Kind) -> TimingStats:
    row = conn.execute(
        "SELECT count, mean, vk FROM timings WHERE day = ? AND queue = ? AND kind = ?",
        (day, queue, kind),
    ).fetchone()
    histogram = [0] * HISTOGRAM_BUCKETS
    for index, n in conn.execute(
        "SELECT bucket, count FROM histograms WHERE day = ? AND queue = ? AND kind = ?",
        (day, queue, kind),
    ):
        histogram[index] = n
    if row is None:
        return TimingStats(0, 0.0, 0.0, tuple(histogram))
    total, mean, vk = row
    std = math.sqrt(max(vk, 0.0) / (total - 1)) if total > 1 else 0.0
    return TimingStats(total, mean, std, tuple(histogram))

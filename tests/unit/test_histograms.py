"""`lanner.histograms`: qless's bucket layout, labels and percentiles from buckets."""

from __future__ import annotations

import itertools

import pytest

from lanner.engines.sqlite.stats import bucket as sqlite_bucket
from lanner.histograms import (
    BUCKETS,
    bucket_bounds,
    bucket_index,
    bucket_label,
    duration,
    percentile,
)


def histogram(**counts: int) -> list[int]:
    """A histogram with `counts` by label: histogram(s3=2, m12=1)."""
    labels = [bucket_label(i) for i in range(BUCKETS)]
    result = [0] * BUCKETS
    for name, n in counts.items():
        result[labels.index(name[1:] + name[0])] = n
    return result


def test_the_layout_is_qless_cores() -> None:
    bounds = bucket_bounds()
    assert BUCKETS == len(bounds) == 148
    assert bounds[0] == (0.0, 1.0)
    assert bounds[59] == (59.0, 60.0)
    assert bounds[60] == (60.0, 120.0)
    assert bounds[118] == (3540.0, 3600.0)
    assert bounds[119] == (3600.0, 7200.0)
    assert bounds[141] == (82800.0, 86400.0)
    assert bounds[142] == (86400.0, 172800.0)
    assert bounds[147] == (6 * 86400.0, 7 * 86400.0)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))  # no gaps


def test_labels_are_lower_bounds_in_human_units() -> None:
    assert [bucket_label(i) for i in (0, 3, 59, 60, 71, 118, 119, 120, 141, 142, 147)] == [
        "0s", "3s", "59s", "1m", "12m", "59m", "1h", "2h", "23h", "1d", "6d",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "seconds", [0, 0.5, 3.2, 59.99, 60, 61, 719, 3599.9, 3600, 7300, 86399, 86400, 6.5 * 86400]
)
def test_bucket_index_agrees_with_the_engines(seconds: float) -> None:
    index = bucket_index(seconds)
    assert index == sqlite_bucket(seconds)
    assert index is not None
    low, high = bucket_bounds()[index]
    assert low <= seconds < high


def test_seven_days_and_more_are_in_no_bucket() -> None:
    assert bucket_index(7 * 86400) is None
    assert sqlite_bucket(7 * 86400) is None


def test_percentiles_interpolate_inside_the_bucket() -> None:
    counts = histogram(s3=4)  # four durations in [3, 4)
    assert percentile(counts, 50) == pytest.approx(3.5)
    assert percentile(counts, 100) == pytest.approx(4.0)
    assert percentile(counts, 0) == pytest.approx(3.0)
    assert percentile(counts, 25) == pytest.approx(3.25)


def test_percentiles_walk_the_buckets_in_order() -> None:
    counts = histogram(s1=90, m12=9, h2=1)  # 100 durations
    assert percentile(counts, 50) == pytest.approx(1 + 50 / 90)
    assert percentile(counts, 90) == pytest.approx(2.0)
    assert percentile(counts, 95) == pytest.approx(720 + 60 * 5 / 9)
    assert percentile(counts, 99) == pytest.approx(780.0)
    assert percentile(counts, 99.5) == pytest.approx(7200 + 3600 * 0.5)


def test_an_empty_histogram_is_zero() -> None:
    assert percentile([0] * BUCKETS, 99) == 0.0


@pytest.mark.parametrize(("p", "size"), [(-1, BUCKETS), (100.5, BUCKETS), (50, 10)])
def test_bad_arguments(p: float, size: int) -> None:
    with pytest.raises(ValueError):
        percentile([1] * size, p)


def test_durations_in_human_units() -> None:
    assert [duration(s) for s in (0.25, 12.5, 192, 7200, 129600)] == [
        "0.25s", "12.5s", "3.2m", "2.0h", "1.5d",
    ]  # fmt: skip

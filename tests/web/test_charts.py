"""The SVG charts: bars where the counts are, text escaped."""

from __future__ import annotations

from lanner.histograms import BUCKETS
from lanner.web import charts


def test_a_histogram_draws_a_bar_per_bucket_up_to_its_last_filled_one() -> None:
    counts = [0] * BUCKETS
    counts[2], counts[61] = 5, 1  # 2-3 s, and 2-3 min
    svg = str(charts.histogram(counts, "wait"))
    assert svg.count('<rect class="bar"') == 62
    assert "<title>2.00s–3.00s: 5 jobs</title>" in svg
    assert "<title>2.0m–3.0m: 1 jobs</title>" in svg
    assert "max 5 jobs" in svg


def test_one_filled_bucket_is_one_bar_among_several() -> None:
    counts = [0] * BUCKETS
    counts[0] = 3
    svg = str(charts.histogram(counts, "run"))
    assert svg.count('<rect class="bar"') == charts.MIN_BUCKETS
    assert 'height="0.0"' in svg  # the empty ones are drawn flat


def test_no_counts_is_said_not_drawn() -> None:
    assert "no run times recorded" in str(charts.histogram([0] * BUCKETS, "run"))


def test_labels_are_escaped() -> None:
    svg = str(charts.bars([("<b>x</b>", 3)], "per <day>", "jobs"))
    assert "<b>" not in svg
    assert "&lt;b&gt;x&lt;/b&gt;" in svg
    assert "per &lt;day&gt;" in svg

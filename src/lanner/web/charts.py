"""Charts drawn as inline SVG on the server: no script, no CDN, readable without colour.

`histogram` draws a day's wait or run times (the engines' 148 buckets, from the first up
to the last one filled, at least MIN_BUCKETS); `bars` draws one value per labelled column
(throughput per day). Every bar carries a <title>, which browsers show as a tooltip and
screen readers read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from markupsafe import Markup, escape

from lanner.histograms import bucket_bounds, bucket_label, duration

WIDTH: Final = 640
HEIGHT: Final = 180
MARGIN: Final = 28  # room for the axis labels
MIN_BUCKETS: Final = 10  # so that one filled bucket is a bar, not the whole chart


def histogram(counts: Sequence[int], what: str) -> Markup:
    """A 148-bucket histogram from its first bucket to its last filled one, a bar each."""
    filled = [n for n, count in enumerate(counts) if count]
    if not filled:
        return Markup('<p class="empty">no {} times recorded this day</p>').format(what)
    last = max(filled[-1], MIN_BUCKETS - 1)
    columns = [
        (f"{duration(low)}–{duration(high)}", counts[n], bucket_label(n))
        for n, (low, high) in enumerate(bucket_bounds()[: last + 1])
    ]
    return _draw(columns, f"{what} time histogram", "jobs")


def bars(columns: Sequence[tuple[str, int]], what: str, unit: str) -> Markup:
    """One bar per (label, value), labelled under the axis."""
    return _draw([(label, value, label) for label, value in columns], what, unit)


def _draw(columns: Sequence[tuple[str, int, str]], title: str, unit: str) -> Markup:
    top = max((value for _, value, _ in columns), default=0) or 1
    plot_height = HEIGHT - 2 * MARGIN
    step = (WIDTH - MARGIN) / max(1, len(columns))
    every = max(1, len(columns) // 8)  # at most about eight axis labels
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<text class="axis" x="{MARGIN}" y="14">max {top} {escape(unit)}</text>',
        f'<line class="axis" x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH}" '
        f'y2="{HEIGHT - MARGIN}"/>',
    ]
    for n, (tooltip, value, label) in enumerate(columns):
        height = plot_height * value / top
        x = MARGIN + n * step
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{HEIGHT - MARGIN - height:.1f}" '
            f'width="{max(1.0, step - 1):.1f}" height="{height:.1f}">'
            f"<title>{escape(tooltip)}: {value} {escape(unit)}</title></rect>"
        )
        if n % every == 0:
            parts.append(
                f'<text class="label" x="{x:.1f}" y="{HEIGHT - MARGIN + 14}">{escape(label)}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 (every text in it went through escape)

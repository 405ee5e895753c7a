"""The command on a queue's per-day statistics:

    lanner stats QUEUE [--date YYYY-MM-DD] [--json]   wait and run histograms of one day

Engines with the `stats` capability keep them (qless's: count, mean, standard deviation
and a histogram of wait and run times, and the day's failure counters); percentiles come
from the histograms (`lanner.histograms`), so they are approximate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import click
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from lanner.commands.common import connection_options, json_option, session
from lanner.commands.known import require_queues
from lanner.commands.rendering import key_values, print_json
from lanner.engine import Capability
from lanner.histograms import bucket_bounds, bucket_label, duration, percentile
from lanner.records import QueueStats, TimingStats

__all__ = ["COMMANDS", "stats_document", "timing_document"]

PERCENTILES: Final = (50, 95, 99)
BAR_WIDTH: Final = 40
"""The longest bar, in characters: the fullest bucket's; the others in proportion."""


def timing_document(timing: TimingStats) -> dict[str, Any]:
    """A timing as JSON: count, mean, std, p50/p95/p99 (seconds) and its non-empty buckets."""
    bounds = bucket_bounds()
    return {
        "count": timing.count,
        "mean": timing.mean,
        "std": timing.std,
        **{f"p{p}": percentile(timing.histogram, p) for p in PERCENTILES},
        "buckets": [
            {"label": bucket_label(i), "low": bounds[i][0], "high": bounds[i][1], "count": n}
            for i, n in enumerate(timing.histogram)
            if n
        ],
    }


def stats_document(queue: str, day: str, stats: QueueStats) -> dict[str, Any]:
    """What `stats --json` prints."""
    return {
        "queue": queue,
        "date": day,
        "failed": stats.failed,
        "failures": stats.failures,
        "retries": stats.retries,
        "wait": timing_document(stats.wait),
        "run": timing_document(stats.run),
    }


def bars(histogram: Sequence[int]) -> Table:
    """One line per non-empty bucket: its label, a bar in proportion, its count."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    fullest = max(histogram, default=0)
    for index, count in enumerate(histogram):
        if count:
            width = max(1, round(count * BAR_WIDTH / fullest))
            grid.add_row(bucket_label(index), Text("█" * width, style="cyan"), str(count))
    return grid


def timing_section(title: str, timing: TimingStats) -> Group:
    header = Text(title, style="bold")
    if timing.count == 0:
        return Group(header, Text("  nothing measured"))
    figures = [
        f"count {timing.count}",
        f"mean {duration(timing.mean)}",
        f"std {duration(timing.std)}",
        *(f"p{p} {duration(percentile(timing.histogram, p))}" for p in PERCENTILES),
    ]
    indented = Padding(bars(timing.histogram), (0, 0, 0, 2), expand=False)
    return Group(header, Text("  " + "  ".join(figures)), indented)


def print_stats(console: Console, queue: str, day: str, stats: QueueStats) -> None:
    console.print(Text(f"{queue} on {day} (UTC)", style="bold"))
    console.print(
        key_values(
            [
                ("failed", stats.failed),
                ("failures", stats.failures),
                ("retries", stats.retries),
            ]
        )
    )
    console.print()
    console.print(timing_section("wait (put or due, to popped)", stats.wait))
    console.print()
    console.print(timing_section("run (popped, to completed)", stats.run))


@click.command("stats")
@click.argument("queue")
@click.option(
    "--date",
    "day",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    metavar="YYYY-MM-DD",
    help="The (UTC) day to show (default: today).",
)
@json_option
@connection_options
def stats_command(
    app_path: str | None,
    broker: str | None,
    queue: str,
    day: datetime | None,
    as_json: bool,
) -> None:
    """QUEUE's wait and run times on one day: histograms, mean, percentiles; failures."""
    when = day.replace(tzinfo=UTC).timestamp() if day is not None else time.time()
    shown = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")
    with session(app_path, broker) as app:
        engine = app.engine
        if Capability.STATS not in engine.capabilities:
            raise click.ClickException(
                f"the {engine.name} engine keeps no per-day statistics (no 'stats' capability)"
            )
        require_queues(app, [queue])
        stats = engine.stats(queue, when)
    if as_json:
        print_json(stats_document(queue, shown, stats))
    else:
        print_stats(Console(), queue, shown, stats)


COMMANDS: Final = (stats_command,)

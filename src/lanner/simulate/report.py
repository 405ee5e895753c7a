"""The terminal view of simulation results: rich tables, and the JSON form for scripts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from lanner.simulate.results import RunResult
from lanner.simulate.scenario import STATIC, Scenario
from lanner.simulate.seeds import PairedStat
from lanner.simulate.sweep import SweepPoint, factor

__all__ = [
    "clock",
    "paired_table",
    "queue_table",
    "seconds",
    "summary_table",
    "sweep_json",
    "sweep_table",
]


def seconds(value: float) -> str:
    """A duration for people: 3ms, 1.25s, 4.2min, 1.5h."""
    if math.isinf(value):
        return "∞"
    if value < 1:
        return f"{value * 1000:.3g}ms"
    if value < 120:
        return f"{value:.3g}s"
    if value < 7200:
        return f"{value / 60:.3g}min"
    return f"{value / 3600:.3g}h"


def clock(value: float) -> str:
    """A moment of the simulated run as h:mm, or h:mm:ss when it has seconds."""
    hours, rest = divmod(round(value), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def times(value: float | None) -> str:
    if value is None:
        return ""
    if math.isinf(value):
        return "∞"
    return f"{value:,.0f}×" if value >= 100 else f"{value:.3g}×"


def _table(title: str, caption: str | None = None) -> Table:
    return Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
    )


def queue_table(scenario: Scenario, results: Sequence[RunResult]) -> Table:
    """Per queue and policy: the waits, throughput, share of the workers, starvation."""
    window = results[0].window
    table = _table(
        f"{scenario.name}: {results[0].workers} workers; the tasks arriving "
        f"{clock(window.start)}-{clock(window.end)}"
    )
    for header in ("queue", "policy", "tasks", "mean", "p50", "p99", "max"):
        table.add_column(header, justify="left" if header in ("queue", "policy") else "right")
    for header in ("/s", "busy", "starved"):
        table.add_column(header, justify="right")
    for index, queue in enumerate(scenario.queues):
        for n, result in enumerate(results):
            row = result.queue(queue.name)
            policy = result.policy if row.workers is None else f"{STATIC} ({row.workers})"
            table.add_row(
                queue.name if n == 0 else "",
                policy,
                f"{row.wait.count:,}",
                seconds(row.wait.mean),
                seconds(row.wait.p50),
                seconds(row.wait.p99),
                seconds(row.wait.max),
                f"{row.throughput:,.3g}",
                f"{row.busy_share:.0%}",
                seconds(row.starvation),
                end_section=n == len(results) - 1 and index < len(scenario.queues) - 1,
            )
    return table


def summary_table(results: Sequence[RunResult]) -> Table:
    """Per policy: the average wait over every task, how busy the workers were, and how
    many times shorter the average wait is than static assignment's."""
    static = next((r for r in results if r.policy == STATIC), None)
    speeds = "; ".join(
        f"{r.policy} {r.tasks:,} tasks in {r.elapsed:.1f}s ({r.tasks_per_second:,.0f}/s)"
        for r in results
    )
    table = _table("all queues", caption=f"simulated: {speeds}")
    for header in ("policy", "mean wait", "offered load", "utilisation"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    if static is not None:
        table.add_column("static ÷ this", justify="right")
    for result in results:
        cells = [
            result.policy,
            seconds(result.mean_wait),
            f"{result.offered_load:.0%}",
            f"{result.utilisation:.0%}",
        ]
        if static is not None:
            cells.append(times(factor(static, result)))
        table.add_row(*cells)
    return table


def sweep_table(points: Sequence[SweepPoint], policies: Sequence[str]) -> Table:
    """Per load level: each policy's average wait, and static's ÷ each selector's."""
    table = _table("mean wait against load")
    table.add_column("rate ×", justify="right")
    table.add_column("offered load", justify="right")
    for policy in policies:
        table.add_column(policy, justify="right")
    others = [p for p in policies if p != STATIC]
    if STATIC in policies:
        for policy in others:
            table.add_column(f"static ÷ {policy}", justify="right")
    for point in points:
        cells = [f"{point.scale:g}", f"{point.offered_load:.0%}"]
        cells += [seconds(point.results[p].mean_wait) for p in policies]
        if STATIC in policies:
            cells += [times(point.factor(p)) for p in others]
        table.add_row(*cells)
    return table


def sweep_json(points: Sequence[SweepPoint]) -> list[dict[str, Any]]:
    return [
        {
            "scale": point.scale,
            "offered_load": point.offered_load,
            "results": {name: result.to_json() for name, result in point.results.items()},
            "factors": {
                name: point.factor(name) for name in point.results if point.factor(name) is not None
            },
        }
        for point in points
    ]


def paired_table(scenario: Scenario, stats: Sequence[PairedStat]) -> Table:
    """Per queue, statistic and policy: the medians over the seeds, the geometric mean of
    the per-seed ratio against the reference with its 95 % interval, and the seeds won."""
    first = stats[0]
    policies = {stat.policy for stat in stats}
    table = _table(
        f"{scenario.name}: {first.policy if len(policies) == 1 else 'each policy'} against "
        f"{first.reference}, paired over {first.seeds} seeds ({scenario.seed}-"
        f"{scenario.seed + first.seeds - 1})",
        caption="ratio: the geometric mean of this / reference over the seeds, with its "
        "95 % bootstrap interval; lower on: the seeds on which this was lower",
    )
    for header in ("queue", "wait", "policy"):
        table.add_column(header)
    for header in (first.reference, "this", "ratio", "interval", "lower on"):
        table.add_column(header, justify="right")
    previous = None
    for stat in stats:
        new_queue = stat.queue != previous
        if new_queue and previous is not None:
            table.add_section()
        previous = stat.queue
        table.add_row(
            stat.queue if new_queue else "",
            stat.statistic,
            stat.policy,
            seconds(stat.reference_median),
            seconds(stat.median),
            "" if stat.ratio is None else f"{stat.ratio:.3f}",
            "" if stat.low is None else f"{stat.low:.3f}-{stat.high:.3f}",
            f"{stat.lower_on}/{stat.seeds}",
        )
    return table

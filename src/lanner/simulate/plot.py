"""Drawing simulation results with matplotlib (the optional `plot` extra), to PNG or SVG.

Two figures: a comparison (per queue, the distribution of waits and the queue's depth
over time, one line per policy) and a load sweep (the factor against static assignment,
and the average waits, against offered load). Matplotlib is imported here only, and this
module only when a plot is asked for; figures are built without pyplot's global state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from lanner.errors import ConfigError
from lanner.simulate.results import RunResult
from lanner.simulate.scenario import STATIC, Scenario
from lanner.simulate.sweep import SweepPoint

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FORMATS", "plot_comparison", "plot_sweep"]

FORMATS: Final = (".png", ".svg")
_FLOOR: Final = 1e-3  # waits below a millisecond are drawn at 1 ms (a log axis has no 0)
BLOG_FACTOR: Final = 40.0


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(
            "plotting needs matplotlib: pip install 'lanner[plot]'", field="--plot"
        ) from None
    return Figure(figsize=(width, height), layout="constrained")


def check_plot_path(path: str) -> None:
    if Path(path).suffix.lower() not in FORMATS:
        raise ConfigError(f"--plot: {path!r} must end in .png or .svg", field="--plot")


def _save(figure: Figure, path: str) -> None:
    check_plot_path(path)
    figure.savefig(path, dpi=110)


def plot_comparison(scenario: Scenario, results: Sequence[RunResult], path: str) -> None:
    """Per queue: who waited how long (top), and how many tasks waited over time (bottom)."""
    columns = len(scenario.queues)
    figure = _figure(4.2 * columns, 7.0)
    axes = figure.subplots(2, columns, squeeze=False)
    window = results[0].window
    for column, queue in enumerate(scenario.queues):
        top, bottom = axes[0][column], axes[1][column]
        for n, result in enumerate(results):
            label = _label(result, queue.name)
            _wait_curve(top, result, queue.name, label, f"C{n}")
            depth = result.depth
            hours = [t / 3600 for t in depth.times]
            bottom.plot(hours, depth.depths[queue.name], color=f"C{n}", lw=1, label=label)
        top.set_title(f"{queue.name} (priority {queue.config.priority})")
        top.set_xscale("log")
        top.set_yscale("log")
        top.set_xlabel("wait (s)")
        top.grid(True, which="major", alpha=0.3)
        bottom.axvspan(window.start / 3600, window.end / 3600, color="0.9", zorder=0)
        bottom.set_xlabel("time (h); shaded: measured")
        bottom.grid(True, alpha=0.3)
        top.legend(fontsize="small")
    axes[0][0].set_ylabel("share of tasks waiting longer")
    axes[1][0].set_ylabel("tasks waiting")
    figure.suptitle(f"{scenario.name}: {results[0].workers} workers")
    _save(figure, path)


def _label(result: RunResult, queue: str) -> str:
    workers = result.queue(queue).workers
    return result.policy if workers is None else f"{STATIC} ({workers} workers)"


def _wait_curve(axes: Axes, result: RunResult, queue: str, label: str, color: str) -> None:
    curve = result.queue(queue).wait.curve
    if not curve:
        return
    waits = [max(wait, _FLOOR) for _, wait in curve]
    longer = [max(1.0 - p, 1e-5) for p, _ in curve]
    axes.step(waits, longer, where="post", color=color, lw=1.2, label=label)


def plot_sweep(points: Sequence[SweepPoint], policies: Sequence[str], path: str) -> None:
    """The factor against static assignment (left) and the mean waits (right) against load."""
    figure = _figure(10.0, 4.2)
    left, right = figure.subplots(1, 2)
    loads = [point.offered_load * 100 for point in points]
    for n, policy in enumerate(policies):
        waits = [max(point.results[policy].mean_wait, _FLOOR) for point in points]
        right.plot(loads, waits, marker="o", color=f"C{n}", label=policy)
        factors = [point.factor(policy) for point in points]
        if policy != STATIC and all(f is not None for f in factors):
            left.plot(loads, factors, marker="o", color=f"C{n}", label=f"static ÷ {policy}")
    left.axhline(BLOG_FACTOR, color="0.4", ls="--", lw=1, label="40× (the blog's busy hours)")
    left.set_yscale("log")
    left.set_xlabel("offered load in the measured window (% of the workers)")
    left.set_ylabel("times shorter mean wait than static")
    left.legend(fontsize="small")
    left.grid(True, which="both", alpha=0.3)
    right.set_yscale("log")
    right.set_xlabel("offered load in the measured window (% of the workers)")
    right.set_ylabel("mean wait (s)")
    right.legend(fontsize="small")
    right.grid(True, which="both", alpha=0.3)
    _save(figure, path)

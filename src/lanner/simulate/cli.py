"""`lanner simulate`: run a scenario, compare policies, sweep the load, draw the results."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lanner.commands.bounded import BoundedInt
from lanner.errors import LannerError
from lanner.limits import MAX_PROCESSES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from lanner.simulate.results import RunResult
    from lanner.simulate.runner import Job, RunProgress
    from lanner.simulate.scenario import Scenario

ENGINE_ONLY = ("queue", "queue_config", "date", "write_scenario")


@click.command("simulate")
@click.argument("scenario_file", required=False, metavar="SCENARIO.yaml")
@click.option(
    "--compare",
    metavar="POLICIES",
    help="Policies to run side by side, comma separated: selector names "
    "(reduced-lottery, highest-priority-first, ...) and 'static' (workers pinned to "
    "queues). Default: the scenario's selector.",
)
@click.option("--workers", type=click.IntRange(min=1), help="Override the number of workers.")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed.")
@click.option(
    "--seeds",
    type=click.IntRange(min=2),
    metavar="N",
    help="With --compare: run every policy on N seeds (the scenario's and the next ones) "
    "and compare each with the first, paired seed by seed.",
)
@click.option(
    "--rate-scale",
    metavar="X[,X...]",
    help="Multiply every arrival rate by X. Several values sweep the load: one row (and "
    "with --plot one point) per value, with the factor against static assignment.",
)
@click.option("--plot", metavar="FILE", help="Draw the results to FILE (.png or .svg).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--jobs",
    type=BoundedInt(1, MAX_PROCESSES),
    help="Processes to run on (default: the CPU count).",
)
@click.option(
    "--from-engine",
    "engine_url",
    metavar="URL",
    help="Build the scenario from an engine's recorded statistics instead of a file.",
)
@click.option(
    "--queue",
    multiple=True,
    metavar="NAMES",
    help="With --from-engine: the queues, comma separated, highest priority first "
    "(default: every queue of --queue-config, else every queue the engine knows).",
)
@click.option(
    "--queue-config",
    metavar="FILE",
    help="With --from-engine: the workers' queue config YAML (priorities, batch sizes, ...).",
)
@click.option(
    "--date", metavar="YYYY-MM-DD", help="With --from-engine: the day of statistics (UTC)."
)
@click.option("--duration", metavar="DURATION", help="How long tasks arrive, such as 1h.")
@click.option(
    "--write-scenario",
    metavar="FILE",
    help="With --from-engine: also write the scenario built to FILE, to edit and rerun.",
)
def simulate(
    scenario_file: str | None,
    compare: str | None,
    workers: int | None,
    seed: int | None,
    seeds: int | None,
    rate_scale: str | None,
    plot: str | None,
    as_json: bool,
    jobs: int | None,
    engine_url: str | None,
    queue: tuple[str, ...],
    queue_config: str | None,
    date: str | None,
    duration: str | None,
    write_scenario: str | None,
) -> None:
    """Simulate workers running Kale's loop on a workload, before production does.

    Prints per queue the task-in-queue wait (mean, p50, p99, max), throughput, the share
    of the workers' time and starvation (the longest a queue with work went unserved).
    docs/simulate.md describes the scenario format and the model.
    """
    _check_sources(scenario_file, engine_url, queue, queue_config, date, write_scenario)
    try:
        if plot is not None:
            from lanner.simulate.plot import check_plot_path

            check_plot_path(plot)
        scales = _scales(rate_scale)
        if engine_url is not None:
            scenario = _from_engine(engine_url, queue, queue_config, date, workers, duration)
            if write_scenario is not None:
                _write(scenario, write_scenario)
        else:
            assert scenario_file is not None
            from lanner.simulate.loader import load_scenario, parse_duration

            scenario = load_scenario(scenario_file)
            if duration is not None:
                scenario = scenario.with_overrides(duration=parse_duration(duration))
        scenario = scenario.with_overrides(workers=workers, seed=seed)
        policies = _policies(compare, scenario.selector)
        if seeds is None:
            _run(scenario, policies, scales, plot, as_json, jobs)
        else:
            _check_seeds(policies, scales, plot)
            _run_seeds(scenario, scales[0], policies, seeds, as_json, jobs)
    except LannerError as error:
        raise click.ClickException(str(error)) from None


def _check_sources(scenario_file: str | None, engine_url: str | None, *engine_only: object) -> None:
    if (scenario_file is None) == (engine_url is None):
        raise click.UsageError("give a SCENARIO.yaml or --from-engine URL (one of them)")
    if engine_url is None:
        for name, value in zip(ENGINE_ONLY, engine_only, strict=True):
            if value:
                option = "--" + name.replace("_", "-")
                raise click.UsageError(f"{option} goes with --from-engine")


def _scales(text: str | None) -> list[float]:
    if text is None:
        return [1.0]
    scales = []
    for part in text.split(","):
        try:
            scale = float(part)
        except ValueError:
            scale = math.nan
        if not math.isfinite(scale) or scale <= 0:
            raise click.UsageError(f"--rate-scale: {part.strip()!r} is not a number > 0")
        scales.append(scale)
    return scales


def _policies(compare: str | None, default: str) -> list[str]:
    from lanner.selectors import resolve_selector
    from lanner.simulate.scenario import STATIC

    names = [name.strip() for name in (compare or default).split(",") if name.strip()]
    if not names:
        raise click.UsageError("--compare: name at least one policy")
    for name in names:
        if names.count(name) > 1:
            raise click.UsageError(f"--compare: {name!r} is given twice")
        if name != STATIC:
            try:
                resolve_selector(name)
            except LannerError as error:
                raise click.UsageError(f"--compare: {error}; or 'static'") from None
    return names


def _check_seeds(policies: list[str], scales: list[float], plot: str | None) -> None:
    if len(policies) < 2:
        raise click.UsageError("--seeds compares policies: give two or more with --compare")
    if len(scales) > 1:
        raise click.UsageError("--seeds takes one --rate-scale, not a sweep")
    if plot is not None:
        raise click.UsageError("--plot draws one seed's runs; leave out --seeds")


def _from_engine(
    url: str,
    queue: tuple[str, ...],
    queue_config: str | None,
    date: str | None,
    workers: int | None,
    duration: str | None,
) -> Scenario:
    import lanner
    from lanner.queues import load_queue_config, queues_from_names
    from lanner.simulate.fromengine import scenario_from_engine
    from lanner.simulate.loader import parse_duration

    names = [name.strip() for group in queue for name in group.split(",") if name.strip()]
    when = None
    if date is not None:
        try:
            day = datetime.date.fromisoformat(date)
        except ValueError:
            raise click.UsageError(f"--date: {date!r} is not a date such as 2026-11-24") from None
        when = datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.UTC).timestamp()
    engine = lanner.open_engine(url)
    try:
        if queue_config is not None:
            configured = load_queue_config(queue_config)
            chosen = [q for q in configured if not names or q.name in names]
            missing = sorted(set(names) - {q.name for q in configured})
            if missing:
                raise click.UsageError(f"--queue: not in {queue_config}: {', '.join(missing)}")
        else:
            names = names or [counts.name for counts in engine.queues()]
            if not names:
                raise click.UsageError("the engine knows no queues; name them with --queue")
            chosen = list(queues_from_names(names))
        if workers is None:
            workers = len(engine.workers()) or 0
            if not workers:
                raise click.UsageError("the engine knows no workers; give --workers")
        return scenario_from_engine(
            engine,
            chosen,
            workers=workers,
            duration=parse_duration(duration or "1h"),
            date=when,
        )
    finally:
        engine.close()


def _write(scenario: Scenario, path: str) -> None:
    from lanner.simulate.fromengine import scenario_yaml

    try:
        Path(path).write_text(scenario_yaml(scenario))
    except OSError as error:
        raise click.ClickException(f"--write-scenario: {error}") from None
    click.echo(f"wrote the scenario to {path}", err=True)


def _run(
    scenario: Scenario,
    policies: list[str],
    scales: list[float],
    plot: str | None,
    as_json: bool,
    processes: int | None,
) -> None:
    from lanner.simulate import report
    from lanner.simulate.sweep import sweep_jobs, sweep_points

    jobs = sweep_jobs(scenario, policies, scales)
    results = _with_progress(jobs, processes, len(scales) > 1)
    console = _console()
    if len(scales) == 1:
        scaled = jobs[0].scenario
        if as_json:
            click.echo(json.dumps([_finite(r.to_json()) for r in results], indent=2))
        else:
            console.print(report.queue_table(scaled, results))
            console.print(report.summary_table(results))
        if plot is not None:
            from lanner.simulate.plot import plot_comparison

            plot_comparison(scaled, results, plot)
    else:
        points = sweep_points(scenario, policies, scales, results)
        if as_json:
            click.echo(json.dumps(_finite(report.sweep_json(points)), indent=2))
        else:
            console.print(report.sweep_table(points, policies))
        if plot is not None:
            from lanner.simulate.plot import plot_sweep

            plot_sweep(points, policies, plot)
    if plot is not None:
        click.echo(f"plotted to {plot}", err=True)


def _run_seeds(
    scenario: Scenario,
    scale: float,
    policies: list[str],
    count: int,
    as_json: bool,
    processes: int | None,
) -> None:
    from lanner.simulate import report
    from lanner.simulate.seeds import paired_stats, seed_jobs
    from lanner.simulate.sweep import at_scale

    scaled = at_scale(scenario, scale)
    jobs = seed_jobs(scaled, policies, count)
    stats = paired_stats(_with_total_progress(jobs, processes), policies, count)
    if as_json:
        click.echo(json.dumps([_finite(stat.to_json()) for stat in stats], indent=2))
    else:
        _console().print(report.paired_table(scaled, stats))


def _console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))  # a file or pipe: no wrapped tables
    return console


def _with_total_progress(jobs: Sequence[Job], processes: int | None) -> list[RunResult]:
    """One bar for many runs, each counting as one run whose part done is its tasks popped."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from lanner.simulate.runner import run_jobs

    parts = [0.0] * len(jobs)
    columns = (
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )  # fmt: skip
    with Progress(*columns, console=Console(stderr=True)) as progress:
        bar = progress.add_task(f"{len(jobs)} runs", total=len(jobs))

        def update(index: int, popped: int, total: int) -> None:
            parts[index] = min(popped / total, 1.0) if total else 1.0
            progress.update(bar, completed=sum(parts))

        return run_jobs(jobs, processes=processes, progress=update)


def _with_progress(jobs: Sequence[Job], processes: int | None, sweep: bool) -> list[RunResult]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lanner.simulate.runner import run_jobs

    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    )  # fmt: skip
    with Progress(*columns, console=Console(stderr=True)) as progress:
        bars = [progress.add_task(_describe(job, sweep), total=None) for job in jobs]
        return run_jobs(jobs, processes=processes, progress=_updater(progress, bars))


def _describe(job: Job, sweep: bool) -> str:
    suffix = (
        f" at {job.scenario.utilisation_offered(job.scenario.window):.0%} load" if sweep else ""
    )
    return f"{job.policy}{suffix}: tasks"


def _updater(progress: Progress, bars: list[TaskID]) -> RunProgress:
    def update(index: int, done: int, total: int) -> None:
        progress.update(bars[index], completed=done, total=max(done, total))

    return update


def _finite(value: object) -> object:
    """JSON has no infinity: an infinite factor (a mean wait of 0) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value

"""`lanner bench chord` and `lanner bench chord-chaos`: the workflow benchmarks' commands.

Registered by `lanner.tools.bench.cli`, like every benchmark's command; the benchmarks
themselves load when a command runs.
"""

from __future__ import annotations

import json
import statistics

import click
from rich.console import Console
from rich.table import Table

from lanner.errors import LannerError
from lanner.tools.bench.common import BenchError


@click.command("chord")
@click.option("--url", default=None, metavar="URL",
              help="Store to measure; it should be empty. Default: SQLite (synchronous=full) "
              "on a new temporary file, deleted afterwards.")  # fmt: skip
@click.option("--parents", type=click.IntRange(1, 100_000), default=10_000, show_default=True,
              help="Parents of each chord.")  # fmt: skip
@click.option("--rounds", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Chords published and completed, one after the other.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def chord_command(url: str | None, parents: int, rounds: int, as_json: bool) -> None:
    """Measure a chord of N no-op parents: its publish, and how soon its callback is ready
    once the last parent completes (medians of the rounds)."""
    from lanner.tools.bench.chord import run_chord_benchmark
    from lanner.tools.bench.cli_shared import measured

    result = measured(lambda progress: run_chord_benchmark(url, parents, rounds, progress))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = Table(title=f"a chord of {parents:,} no-op parents, median of {rounds} rounds")
    table.add_column("measurement")
    table.add_column("median", justify="right")
    table.add_column("max", justify="right")
    rows = [
        ("publish (one put_many)", result.publish_s, 1000.0),
        ("publish: this process's CPU", result.publish_cpu_s, 1000.0),
        ("last parent's completion (releases the callback)", result.last_complete_ms, 1.0),
        ("callback given to a waiting pop, from that completion's start", result.ready_ms, 1.0),
        ("callback's inputs read (every parent's result)", result.inputs_ms, 1.0),
    ]
    for label, values, to_ms in rows:
        table.add_row(label, f"{statistics.median(values) * to_ms:,.1f} ms",
                      f"{max(values) * to_ms:,.1f} ms")  # fmt: skip
    Console().print(table)
    load = ", ".join(f"{value:.1f}" for value in result.load)
    Console().print(f"engine: {result.url}; load average {load}", style="dim")


@click.command("chord-chaos")
@click.option("--url", required=True, metavar="URL", help="Store the chords run on (emptied "
              "of nothing: use a fresh one).")  # fmt: skip
@click.option("--chords", type=click.IntRange(1, 10_000), default=200, show_default=True)
@click.option("--parents", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("-c", "--concurrency", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Worker processes.")  # fmt: skip
@click.option("-t", "--tasks-per-process", type=click.IntRange(1, 10_000), default=None,
              help="Jobs each process runs at once (default: one).")  # fmt: skip
@click.option("--kill-every", type=click.FloatRange(0.1, 60), default=1.0, show_default=True,
              help="Seconds between two kill -9 of a worker process.")  # fmt: skip
@click.option("--work-ms", type=click.FloatRange(0, 10_000), default=5.0, show_default=True,
              help="Each parent sleeps up to this long.")  # fmt: skip
@click.option("--deadline", type=click.FloatRange(1, 86_400), default=1800.0,
              show_default=True, help="Seconds the chords have to finish.")  # fmt: skip
def chord_chaos_command(
    url: str,
    chords: int,
    parents: int,
    concurrency: int,
    tasks_per_process: int | None,
    kill_every: float,
    work_ms: float,
    deadline: float,
) -> None:
    """Run chords on a pool whose workers are killed (kill -9) every second; print the
    account of every callback as JSON, and fail unless it passed."""
    from lanner.tools.bench.chord_chaos import run_chord_chaos

    try:
        report = run_chord_chaos(
            url, chords, parents, concurrency=concurrency,
            tasks_per_process=tasks_per_process, kill_every=kill_every,
            work_ms=work_ms, deadline=deadline,
        )  # fmt: skip
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(json.dumps(report.to_json(), indent=2))
    if not report.passed:
        raise click.ClickException("the chords did not all run once, whole, after their parents")

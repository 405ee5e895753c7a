"""`lanner bench pool`, `io`, `idle` and `transactional`: the commands of the benchmarks of
an App and a worker pool end to end, and how their results print. The benchmarks load
when a command runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from rich.console import Console, Group
from rich.table import Table

from lanner import limits
from lanner.commands.bounded import BoundedInt
from lanner.errors import LannerError
from lanner.tools.bench.cli_shared import (
    about,
    add_pickup,
    batch_option,
    concurrency_option,
    exit_on_sigterm,
    jobs_option,
    json_option,
    measured,
    measurements,
    samples_option,
    show,
    store_about,
    store_url_option,
    warn_store_kept,
)
from lanner.tools.bench.common import (
    DEFAULT_IO_JOBS,
    DEFAULT_SLEEP_MS,
    DEFAULT_TASKS_PER_PROCESS,
    BenchError,
)

if TYPE_CHECKING:
    from lanner.tools.bench.io import IoBenchResult, Kind
    from lanner.tools.bench.pool import PoolBenchResult


@click.command("pool")
@store_url_option("Store to measure")
@jobs_option("No-op jobs published and drained; a tenth of it for single publishes and 10 ms jobs.")
@concurrency_option(BoundedInt(1, limits.MAX_PROCESSES))
@batch_option("Jobs per publish_many, and the queue's batch_size (jobs per pop).")
@samples_option()
@json_option()
def pool_command(
    url: str | None, jobs: int, concurrency: int, batch: int, samples: int, as_json: bool
) -> None:
    """Measure an App and a worker pool end to end.

    Phases: N/10 task.delay() calls and N jobs by publish_many; a pool of C processes
    draining the N no-op jobs (from its start, and without its start-up); the latency from
    task.delay() to the task starting in the idle pool; and the pool draining N/10 jobs that
    sleep 10 ms (at best C x 100 jobs/s). Progress goes to stderr, results to stdout.
    """
    from lanner.tools.bench.pool import run_pool_benchmark

    warn_store_kept(url, jobs + max(1, jobs // 10) + samples)
    result = measured(
        lambda progress: run_pool_benchmark(url, jobs, concurrency, batch, samples, progress)
    )
    show(result, as_json, lambda: pool_results_view(result))


def pool_results_table(result: PoolBenchResult) -> Table:
    table = measurements(
        f"lanner pool benchmark, {result.jobs:,} jobs, {result.concurrency} processes"
    )
    rates = [
        (f"enqueue, task.delay() ({result.single_jobs:,} jobs)", result.enqueue_single_per_s),
        (f"enqueue, publish_many() of {result.batch}", result.enqueue_batch_per_s),
        ("drain no-op jobs, from pool start", result.drain_noop_per_s),
    ]
    for label, rate in rates:
        table.add_row(label, f"{rate:,.0f} jobs/s")
    steady = result.drain_noop_steady_per_s
    table.add_row(
        "drain no-op jobs, after the first finished",
        "-" if steady is None else f"{steady:,.0f} jobs/s",
    )
    table.add_row("pool start to first job finished", f"{result.startup_s * 1000:.0f} ms")
    pickup = result.pickup_ms
    add_pickup(table, pickup)
    table.add_row(
        f"drain 10 ms jobs ({result.sleep_jobs:,}; ideal {result.sleep_ideal_per_s:,.0f}/s)",
        f"{result.drain_sleep10ms_per_s:,.0f} jobs/s",
    )
    return table


def pool_results_view(result: PoolBenchResult) -> Group:
    """The results table, then what was measured, on what."""
    settings = f"batch: {result.batch}  processes: {result.concurrency}  samples: {result.samples}"
    footer = store_about(f"store: {result.url}", result.synchronous, settings, result.machine)
    return Group(pool_results_table(result), footer)


@click.command("io")
@store_url_option("Store to measure")
@click.option("--jobs", type=click.IntRange(min=1), default=DEFAULT_IO_JOBS, show_default=True,
              help="Jobs published, then drained.")  # fmt: skip
@click.option("--sleep-ms", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_SLEEP_MS,
              show_default=True, help="What each job waits, in milliseconds.")  # fmt: skip
@concurrency_option()
@click.option("-t", "--tasks-per-process", type=click.IntRange(min=1),
              default=DEFAULT_TASKS_PER_PROCESS, show_default=True,
              help="Jobs each process runs at once.")  # fmt: skip
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Of those, how many sync tasks may run at once, in threads.")  # fmt: skip
@click.option("--kind", type=click.Choice(["async", "sync"]), default="async", show_default=True,
              help="async: `await asyncio.sleep`; sync: `time.sleep`.")  # fmt: skip
@json_option()
def io_command(
    url: str | None,
    jobs: int,
    sleep_ms: float,
    concurrency: int,
    tasks_per_process: int,
    threads: int,
    kind: Kind,
    as_json: bool,
) -> None:
    """Measure a worker pool on I/O-bound jobs, many at once per process.

    N jobs that each wait S ms are published, then a pool of C processes running up to T
    jobs each is started on them. Reported: jobs/s from the pool's start to the last
    completion, beside the ceiling C x T / S; the worker processes' CPU per job and their
    memory at the end. Progress goes to stderr, results to stdout.
    """
    from lanner.tools.bench.io import run_io_benchmark

    warn_store_kept(url, jobs)
    result = measured(
        lambda progress: run_io_benchmark(
            url, jobs, sleep_ms, concurrency, tasks_per_process, threads, kind, progress
        )
    )
    show(result, as_json, lambda: io_results_view(result))


def io_results_view(result: IoBenchResult) -> Group:
    """The results table, then what was measured, on what."""
    table = measurements(
        f"lanner io benchmark, {result.jobs:,} {result.kind} jobs of {result.sleep_ms:g} ms"
    )
    at_once = f"{result.concurrency} processes x {result.at_once_per_process} at once"
    table.add_row("drain, from pool start", f"{result.drain_per_s:,.0f} jobs/s")
    share = result.drain_per_s / result.ceiling_per_s
    table.add_row(f"ceiling ({at_once})", f"{result.ceiling_per_s:,.0f} jobs/s ({share:.0%})")
    table.add_row("pool start to first job finished", f"{result.startup_s * 1000:.0f} ms")
    table.add_row("most jobs seen running at once", f"{result.peak_running:,}")
    table.add_row("worker CPU per job", f"{result.worker_cpu_us_per_job:,.0f} µs")
    table.add_row("supervisor CPU per job", f"{result.supervisor_cpu_us_per_job:,.0f} µs")
    rss = ", ".join(f"{mb:.1f}" for mb in result.rss_mb)
    table.add_row(f"memory per process (RSS: {rss})", f"{result.rss_mb_mean:.1f} MB")
    table.add_row("enqueue, publish_many() of 100", f"{result.enqueue_per_s:,.0f} jobs/s")
    settings = (
        f"tasks per process: {result.tasks_per_process}  threads: {result.threads}  "
        f"event loop: {result.event_loop}"
    )
    footer = store_about(f"store: {result.url}", result.synchronous, settings, result.machine)
    return Group(table, footer)


@click.command("idle")
@store_url_option("Store the idle pool serves")
@concurrency_option()
@click.option("--seconds", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="How long the idle processes are measured.")  # fmt: skip
@click.option("--samples", type=click.IntRange(min=1), default=20, show_default=True,
              help="Pickup-latency samples, after the idle time.")  # fmt: skip
@click.option("--web", is_flag=True, help="Also measure an idle dashboard (lanner web).")
@json_option()
def idle_command(
    url: str | None, concurrency: int, seconds: float, samples: int, web: bool, as_json: bool
) -> None:
    """Measure what an idle pool costs: CPU % of one core per process (supervisor, each
    worker; with --web the dashboard too), then the pickup latency of single jobs."""
    from lanner.tools.bench.idle import run_idle_benchmark

    result = measured(
        lambda progress: run_idle_benchmark(url, concurrency, seconds, samples, web, progress)
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = measurements(f"lanner idle pool, {concurrency} processes, {seconds:g} s")
    table.add_row("CPU, supervisor", f"{result.supervisor_cpu_pct:.2f} % of a core")
    for number, cpu in enumerate(result.worker_cpu_pct, 1):
        table.add_row(f"CPU, worker {number}", f"{cpu:.2f} % of a core")
    if result.web_cpu_pct is not None:
        table.add_row("CPU, dashboard (lanner web)", f"{result.web_cpu_pct:.2f} % of a core")
    pickup = result.pickup_ms
    for label, ms in (("p50", pickup.p50), ("p95", pickup.p95), ("max", pickup.max)):
        table.add_row(f"pickup latency {label} ({pickup.count} samples)", f"{ms:.2f} ms")
    Console().print(Group(table, about(result.url, result.machine)))


@click.command("transactional")
@click.option("--broker", metavar="URL",
              help="Redis or SQS (through the outbox); default: SQLite, the application's "
                   "own database file.")  # fmt: skip
@click.option("-n", "--transactions", type=BoundedInt(2, limits.MAX_RUN_JOBS), default=1000,
              show_default=True, help="Transactions, every other one rolled back.")  # fmt: skip
@click.option("--kill-ms", type=click.FloatRange(min=1), default=100.0, show_default=True,
              help="Each publisher is killed at a random time up to this.")  # fmt: skip
@concurrency_option()
@click.option("--seed", type=int, help="Seed of the kill times.")
@json_option()
def transactional_command(
    broker: str | None,
    transactions: int,
    kill_ms: float,
    concurrency: int,
    seed: int | None,
    as_json: bool,
) -> None:
    """Publish within transactions (half rolled back) while the publisher is killed at
    random points; check that exactly the committed jobs ran, each once (exit 1 if not)."""
    from lanner.tools.bench.transactional import run_transactional

    try:
        with exit_on_sigterm():
            result = run_transactional(
                broker, transactions, kill_ms=kill_ms, concurrency=concurrency, seed=seed
            )
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        table = measurements(f"lanner transactional publishing, {transactions} transactions")
        for label, value in (
            ("committed", result.committed),
            ("rolled back", result.rolled_back),
            ("publishers killed", result.publishers_killed),
            ("jobs run", result.ran),
            ("committed, never run", len(result.missing)),
            ("run, never committed", len(result.unexpected)),
            ("run more than once", len(result.duplicated)),
            ("seconds", f"{result.seconds:.1f}"),
        ):
            table.add_row(label, str(value))
        Console().print(table)
    if not result.ok:
        raise SystemExit(1)

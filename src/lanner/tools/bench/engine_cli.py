"""`lanner bench engine`, `depth`, `shards` and `publish`: the commands of the benchmarks
of an engine on its own (throughput and pickup latency; a deep backlog; a Redis Cluster's
shards; single publishes from many threads), and
how their results print. The benchmarks load when a command runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from rich.console import Console, Group
from rich.table import Table

from lanner import limits
from lanner.commands.bounded import BoundedInt
from lanner.tools.bench.cli_shared import (
    about,
    add_pickup,
    batch_option,
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

if TYPE_CHECKING:
    from lanner.tools.bench.engine import EngineBenchResult


@click.command("engine")
@store_url_option("Engine to measure")
@jobs_option("Jobs per throughput phase.")
@batch_option("Jobs per put_many, and per pop in the drain phases.")
@samples_option()
@click.option(
    "--result-bytes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Each drained job keeps a result (JSON text) of this many bytes; 0: none.",
)
@json_option()
def engine_command(
    url: str | None, jobs: int, batch: int, samples: int, result_bytes: int, as_json: bool
) -> None:
    """Measure the job engine: put and drain throughput, and pickup latency.

    Phases: N single puts; N jobs by put_many; draining N jobs with pop + complete_many in
    1 and then 2 processes; and the latency from a put to a blocked pop in another process
    returning it. On Redis, also the floor under that latency on this machine: a bare
    LPUSH to a BLPOP blocked in another process. Progress goes to stderr, results to
    stdout.
    """
    from lanner.tools.bench.engine import run_engine_benchmark

    warn_store_kept(url, 2 * jobs + samples + 1)
    result = measured(
        lambda progress: run_engine_benchmark(url, jobs, batch, samples, progress, result_bytes)
    )
    show(result, as_json, lambda: results_view(result))


def results_table(result: EngineBenchResult) -> Table:
    table = measurements(f"lanner engine benchmark, {result.jobs:,} jobs")
    kept = f", {result.result_bytes} B results" if result.result_bytes else ""
    rates = [
        ("put, 1 job per call", result.put_single_per_s),
        (f"put_many, {result.batch} jobs per call", result.put_batch_per_s),
        (f"pop + complete_many ({result.batch}{kept}), 1 process", result.drain_1proc_per_s),
        (f"pop + complete_many ({result.batch}{kept}), 2 processes", result.drain_2proc_per_s),
    ]
    for label, rate in rates:
        table.add_row(label, f"{rate:,.0f} jobs/s")
    pickup = result.pickup_ms
    add_pickup(table, pickup)
    if (floor := result.pickup_floor_ms) is not None:
        for label, ms in (("p50", floor.p50), ("p99", floor.p99)):
            table.add_row(f"pickup floor {label} (bare LPUSH to BLPOP)", f"{ms:.2f} ms")
    if (spent := result.requests_per_job) is not None:
        for key, label in (
            ("put", "put"),
            ("put_many", "put_many"),
            ("drain_1", "pop + complete_many, 1 process"),
            ("drain_2", "pop + complete_many, 2 processes"),
            ("steady", "put_many + pop + complete_many (steady load)"),
        ):
            table.add_row(f"requests per job: {label}", f"{spent[key]:.3f}")
    return table


def results_view(result: EngineBenchResult) -> Group:
    """The results table, then what was measured, on what."""
    settings = f"batch: {result.batch}  samples: {result.samples}"
    footer = store_about(f"engine: {result.url}", result.synchronous, settings, result.machine)
    return Group(results_table(result), footer)


@click.command("depth")
@store_url_option("Store to fill")
@click.option("--depths", default="1000,100000,1000000", show_default=True, metavar="N,N,...",
              help="Waiting jobs to measure at, ascending (filled to each in turn).")  # fmt: skip
@click.option("--queues", type=BoundedInt(1, 1000), default=1, show_default=True,
              help="Queues the jobs are spread over.")  # fmt: skip
@click.option("--samples", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=200, show_default=True,
              help="pop + complete (and single put) samples at each depth.")  # fmt: skip
@json_option()
def depth_command(url: str | None, depths: str, queues: int, samples: int, as_json: bool) -> None:
    """Measure an engine with a deep backlog: put_many rate while filling, pop + complete
    and single-put latency, `lanner status` time, bytes per job and RSS at each depth."""
    from lanner.tools.bench.common import bench_store
    from lanner.tools.bench.depth import depth_table, run_depth_bench

    try:
        levels = [int(level) for level in depths.split(",")]
    except ValueError:
        raise click.BadParameter(f"not numbers: {depths!r}", param_hint="--depths") from None
    with bench_store(url) as store:
        result = measured(
            lambda progress: run_depth_bench(store, levels, queues, samples, progress)
        )
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        Console().print(depth_table(result))


@click.command("shards")
@click.option("--url", required=True, metavar="URL",
              help="A Redis Cluster (redis+cluster://...), 2 primaries or more.")  # fmt: skip
@click.option("--jobs", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Jobs put, popped and completed in each layout.")  # fmt: skip
@click.option("--queues", type=click.IntRange(min=1), default=6, show_default=True,
              help="Queues the jobs are spread over.")  # fmt: skip
@click.option("--single", default=None, metavar="URL",
              help="A Redis (redis://...) to run the same work on first (baseline).")  # fmt: skip
@json_option()
def shards_command(url: str, jobs: int, queues: int, single: str | None, as_json: bool) -> None:
    """Measure the Redis CPU per job of each shard of a Redis Cluster, with the queues
    spread over the primaries, then all served by one."""
    from lanner.tools.bench.shards import run_shards_benchmark

    result = measured(lambda progress: run_shards_benchmark(url, jobs, queues, progress, single))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = Table(title=f"lanner on Redis Cluster: {jobs} jobs over {queues} queues")
    for column in ("layout", "primary", "queues", "CPU µs/job", "in commands µs/job"):
        table.add_column(column, justify="left" if column in ("layout", "primary") else "right")
    for layout in result.layouts:
        for shard in layout.shards:
            cpu, in_commands = f"{shard.cpu_us_per_job:.0f}", f"{shard.command_us_per_job:.0f}"
            table.add_row(layout.layout, shard.node, str(shard.queues), cpu, in_commands)
        table.add_row(layout.layout, "client", "", f"{layout.jobs_per_s:.0f} jobs/s", "")
    Console().print(Group(table, about(result.url, result.machine)))


@click.command("publish")
@store_url_option("Store to publish to")
@jobs_option("Jobs published in all, one .delay() each.", default=2000)
@click.option("--threads", type=BoundedInt(1, 256), default=1, show_default=True,
              help="Publishing threads in each process.")  # fmt: skip
@click.option("--processes", type=BoundedInt(1, 64), default=1, show_default=True,
              help="Publishing processes.")  # fmt: skip
@json_option()
def publish_command(
    url: str | None, jobs: int, threads: int, processes: int, as_json: bool
) -> None:
    """Measure single publishes: `.delay()` calls, one job each, from THREADS threads in
    each of PROCESSES processes at once: jobs/s, publisher CPU per publish, latency."""
    from lanner.tools.bench.publish import run_publish_benchmark

    result = measured(
        lambda progress: run_publish_benchmark(url, jobs, threads, processes, progress)
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = measurements(f"{jobs:,} single .delay() calls, {processes} × {threads} threads")
    table.add_row("publishes", f"{result.per_s:,.0f} jobs/s")
    table.add_row("publisher CPU", f"{result.cpu_us:,.0f} µs per publish")
    for label, ms in result.latency_ms.items():
        table.add_row(f"latency {label}", f"{ms:.2f} ms")
    Console().print(Group(table, about(result.url, result.machine)))

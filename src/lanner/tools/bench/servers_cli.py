"""`lanner bench kestrel` and `web`: the commands of the benchmarks of the servers in front
of an engine (`lanner serve`, `lanner web`), and how their results print. The benchmarks
load when a command runs.
"""

from __future__ import annotations

import json

import click
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from lanner import limits
from lanner.commands.bounded import BoundedInt
from lanner.tools.bench.cli_shared import (
    about,
    json_option,
    measured,
    store_url_option,
)


@click.command("kestrel")
@store_url_option("Engine behind `lanner serve`")
@click.option("-n", "--connections", "connections", multiple=True,
              type=BoundedInt(1, limits.MAX_CONNECTIONS), default=(1, 4, 16, 100, 1000),
              show_default=True,
              help="Connections doing set+get pairs at once; repeat for several runs.")  # fmt: skip
@click.option("--pairs", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=4000,
              show_default=True,
              help="Set+get pairs per run, shared by its connections.")  # fmt: skip
@click.option("--rounds", type=BoundedInt(1, 100), default=1, show_default=True,
              help="Runs of each server at each number of connections, taking turns; "
                   "the medians are shown.")  # fmt: skip
@click.option("-p", "--processes", type=BoundedInt(1, limits.MAX_PROCESSES), default=1,
              show_default=True, help="`lanner serve --processes`.")  # fmt: skip
@click.option("--value-bytes", type=click.IntRange(min=0), default=100, show_default=True,
              help="Size of each item.")  # fmt: skip
@json_option()
def kestrel_command(
    url: str | None,
    connections: tuple[int, ...],
    pairs: int,
    rounds: int,
    processes: int,
    value_bytes: int,
    as_json: bool,
) -> None:
    """Measure `lanner serve` beside memcached in the same run: set+get pairs per second of
    N connections at once (each a set then a get, one request at a time), and the item rate
    of one consumer with blocking gets."""
    from lanner.tools.bench.kestrel import run_kestrel_benchmark

    result = measured(
        lambda progress: run_kestrel_benchmark(
            url, connections, pairs, value_bytes, progress, rounds=rounds, processes=processes
        )
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    served = f"{processes} process{'es' if processes > 1 else ''}"
    table = Table(
        title=f"lanner serve ({served}) beside memcached: set+get pairs of {value_bytes} B, "
        f"medians of {rounds} round{'s' if rounds > 1 else ''}"
    )
    columns = ("connections", "lanner serve", "memcached", "ratio", "of peak", "CPU µs/pair")
    for column in columns:
        table.add_column(column, justify="right")
    for row in result.rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        theirs = "not installed" if row.memcached_per_s is None else f"{row.memcached_per_s:,.0f}/s"
        cpu = " / ".join("?" if us is None else f"{us:,.0f}"
                         for us in (row.lanner_cpu_us, row.memcached_cpu_us))  # fmt: skip
        table.add_row(f"{row.connections:,}", f"{row.lanner_per_s:,.0f}/s", theirs, ratio,
                      f"{row.lanner_per_s / result.peak_per_s:.0%}", cpu)  # fmt: skip
    lone = result.lone
    consumer = Text(
        f"one client alone: set {lone.set_ms:.2f} ms, get {lone.get_ms:.2f} ms (medians); "
        f"the engine's own put {lone.engine_put_ms:.2f} ms, pop {lone.engine_pop_ms:.2f} ms\n"
        f"the engine alone, batches of 100 (put_many, pop, complete_many): "
        f"{result.engine_batched_per_s:,.0f} pairs/s, {result.engine_batched_cpu_us:,.0f} µs of "
        "CPU per pair\n"
        f"one consumer, get q/t=1000 while a producer sets: "
        f"{result.blocking_consumer_per_s:,.0f} items/s"
    )
    cpu_note = Text("CPU µs/pair: each server's process (and those under it), lanner / memcached")
    Console().print(Group(table, cpu_note, consumer, about(result.url, result.machine)))


@click.command("web")
@store_url_option("Engine to fill and browse")
@click.option("--jobs", type=BoundedInt(100, limits.MAX_RUN_JOBS), default=100_000,
              show_default=True, help="Jobs in the store while the pages are fetched.")  # fmt: skip
@click.option("--samples", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=20, show_default=True,
              help="Fetches of each page.")  # fmt: skip
@json_option()
def web_command(url: str | None, jobs: int, samples: int, as_json: bool) -> None:
    """Measure the dashboard: engine commands and time per page, on a store of N jobs."""
    try:
        from lanner.tools.bench.web import run_web_benchmark
    except ImportError as error:
        raise click.ClickException(
            f"needs the web extra: pip install 'lanner[web]' ({error})"
        ) from None
    result = measured(lambda progress: run_web_benchmark(url, jobs, samples, progress))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = Table(title=f"lanner web: cost per page, {result.jobs:,} jobs in the store")
    for column in ("page", "engine commands", "median", "p95"):
        table.add_column(column, justify="left" if column == "page" else "right")
    for page in result.pages:
        table.add_row(page.path, str(page.engine_calls), f"{page.median_ms:.1f} ms",
                      f"{page.p95_ms:.1f} ms")  # fmt: skip
    Console().print(Group(table, about(result.url, result.machine)))

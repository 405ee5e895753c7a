"""The `lanner bench` command group: runs benchmarks and shows their results.

The benchmarks themselves (`lanner.bench.engine`, `lanner.bench.pool`) are imported when
a command runs, so that `lanner --help` does not load multiprocessing and the worker pool.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from lanner import limits
from lanner.bench.common import (
    DEFAULT_BATCH,
    DEFAULT_CONCURRENCY,
    DEFAULT_IO_JOBS,
    DEFAULT_JOBS,
    DEFAULT_SAMPLES,
    DEFAULT_SLEEP_MS,
    DEFAULT_TASKS_PER_PROCESS,
    BenchError,
    BenchProgress,
    MachineInfo,
)
from lanner.commands.bounded import BoundedInt
from lanner.errors import LannerError

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from lanner.bench.engine import EngineBenchResult
    from lanner.bench.io import IoBenchResult, Kind
    from lanner.bench.pool import PoolBenchResult


class RichProgress:
    """A `BenchProgress` drawing one bar per phase with rich."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def phase(self, description: str, total: int) -> None:
        self._task = self._progress.add_task(description, total=total)

    def advance(self, amount: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, amount)


def progress_bar(console: Console) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into `SystemExit`, so that a benchmark killed by `timeout` or a
    supervisor still stops its children and deletes its temporary store."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def measured(benchmark: Callable[[BenchProgress], R]) -> R:
    """Run `benchmark` with progress bars on stderr; its errors become one line, status 1."""
    try:
        with exit_on_sigterm(), progress_bar(Console(stderr=True)) as bar:
            return benchmark(RichProgress(bar))
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error


@click.group()
def bench() -> None:
    """Measure lanner's performance on this machine."""


def _about(url: str, machine: MachineInfo) -> Text:
    """The engine and machine a benchmark ran on, under its table."""
    return Text(f"engine: {url}\n{machine.platform}, {machine.cpu_count} CPUs\n"
                f"Python {machine.python}, lanner {machine.lanner}", style="dim")  # fmt: skip


def _store_url_option(what: str) -> Callable[[F], F]:
    """`--url`: the store a benchmark uses, `what` it is; a temporary SQLite file if unset."""
    return click.option(
        "--url",
        default=None,
        metavar="URL",
        help=f"{what}; it should be empty. Default: SQLite (synchronous=full) on a new "
        "temporary file, deleted afterwards.",
    )


@bench.command("engine")
@_store_url_option("Engine to measure")
@click.option(
    "--jobs",
    type=BoundedInt(1, limits.MAX_RUN_JOBS),
    default=DEFAULT_JOBS,
    show_default=True,
    help="Jobs per throughput phase.",
)
@click.option(
    "--batch",
    type=BoundedInt(1, limits.MAX_BATCH_SIZE),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Jobs per put_many, and per pop in the drain phases.",
)
@click.option(
    "--samples",
    type=BoundedInt(1, limits.MAX_RUN_JOBS),
    default=DEFAULT_SAMPLES,
    show_default=True,
    help="Pickup-latency samples.",
)
@click.option(
    "--result-bytes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Each drained job keeps a result (JSON text) of this many bytes; 0: none.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
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
    from lanner.bench.engine import run_engine_benchmark

    errors = Console(stderr=True)
    if url is not None:
        errors.print(
            f"[yellow]warning:[/] measuring {url}: it should be an empty store; "
            f"the benchmark leaves {2 * jobs + samples + 1} completed jobs in it.",
            highlight=False,
        )
    result = measured(
        lambda progress: run_engine_benchmark(url, jobs, batch, samples, progress, result_bytes)
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        Console().print(results_view(result))


def results_table(result: EngineBenchResult) -> Table:
    table = Table(title=f"lanner engine benchmark, {result.jobs:,} jobs")
    table.add_column("measurement")
    table.add_column("result", justify="right")
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
    for label, ms in (("p50", pickup.p50), ("p95", pickup.p95), ("p99", pickup.p99)):
        table.add_row(f"pickup latency {label}", f"{ms:.2f} ms")
    table.add_row(f"pickup latency max ({pickup.count} samples)", f"{pickup.max:.2f} ms")
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
    machine = result.machine
    synchronous = "" if result.synchronous is None else f"synchronous={result.synchronous}  "
    about = Text(
        f"engine: {result.url}\n{synchronous}batch: {result.batch}  samples: {result.samples}\n"
        f"{machine.platform}, {machine.cpu_count} CPUs\n"
        f"Python {machine.python}, SQLite {machine.sqlite}, lanner {machine.lanner}",
        style="dim",
    )
    return Group(results_table(result), about)


@bench.command("pool")
@_store_url_option("Store to measure")
@click.option(
    "--jobs",
    type=BoundedInt(1, limits.MAX_RUN_JOBS),
    default=DEFAULT_JOBS,
    show_default=True,
    help="No-op jobs published and drained; a tenth of it for single publishes and 10 ms jobs.",
)
@click.option(
    "-c",
    "--concurrency",
    type=BoundedInt(1, limits.MAX_PROCESSES),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Worker processes in the pool.",
)
@click.option(
    "--batch",
    type=BoundedInt(1, limits.MAX_BATCH_SIZE),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Jobs per publish_many, and the queue's batch_size (jobs per pop).",
)
@click.option(
    "--samples",
    type=BoundedInt(1, limits.MAX_RUN_JOBS),
    default=DEFAULT_SAMPLES,
    show_default=True,
    help="Pickup-latency samples.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def pool_command(
    url: str | None, jobs: int, concurrency: int, batch: int, samples: int, as_json: bool
) -> None:
    """Measure an App and a worker pool end to end.

    Phases: N/10 task.delay() calls and N jobs by publish_many; a pool of C processes
    draining the N no-op jobs (from its start, and without its start-up); the latency from
    task.delay() to the task starting in the idle pool; and the pool draining N/10 jobs that
    sleep 10 ms (at best C x 100 jobs/s). Progress goes to stderr, results to stdout.
    """
    from lanner.bench.pool import run_pool_benchmark

    errors = Console(stderr=True)
    if url is not None:
        left = jobs + max(1, jobs // 10) + samples
        errors.print(
            f"[yellow]warning:[/] measuring {url}: it should be an empty store; "
            f"the benchmark leaves {left} completed jobs in it.",
            highlight=False,
        )
    result = measured(
        lambda progress: run_pool_benchmark(url, jobs, concurrency, batch, samples, progress)
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        Console().print(pool_results_view(result))


def pool_results_table(result: PoolBenchResult) -> Table:
    table = Table(
        title=f"lanner pool benchmark, {result.jobs:,} jobs, {result.concurrency} processes"
    )
    table.add_column("measurement")
    table.add_column("result", justify="right")
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
    for label, ms in (("p50", pickup.p50), ("p95", pickup.p95), ("p99", pickup.p99)):
        table.add_row(f"pickup latency {label}", f"{ms:.2f} ms")
    table.add_row(f"pickup latency max ({pickup.count} samples)", f"{pickup.max:.2f} ms")
    table.add_row(
        f"drain 10 ms jobs ({result.sleep_jobs:,}; ideal {result.sleep_ideal_per_s:,.0f}/s)",
        f"{result.drain_sleep10ms_per_s:,.0f} jobs/s",
    )
    return table


def pool_results_view(result: PoolBenchResult) -> Group:
    """The results table, then what was measured, on what."""
    machine = result.machine
    synchronous = "" if result.synchronous is None else f"synchronous={result.synchronous}  "
    about = Text(
        f"store: {result.url}\n{synchronous}batch: {result.batch}  "
        f"processes: {result.concurrency}  samples: {result.samples}\n"
        f"{machine.platform}, {machine.cpu_count} CPUs\n"
        f"Python {machine.python}, SQLite {machine.sqlite}, lanner {machine.lanner}",
        style="dim",
    )
    return Group(pool_results_table(result), about)


@bench.command("io")
@_store_url_option("Store to measure")
@click.option("--jobs", type=click.IntRange(min=1), default=DEFAULT_IO_JOBS, show_default=True,
              help="Jobs published, then drained.")  # fmt: skip
@click.option("--sleep-ms", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_SLEEP_MS,
              show_default=True, help="What each job waits, in milliseconds.")  # fmt: skip
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=DEFAULT_CONCURRENCY,
              show_default=True, help="Worker processes in the pool.")  # fmt: skip
@click.option("-t", "--tasks-per-process", type=click.IntRange(min=1),
              default=DEFAULT_TASKS_PER_PROCESS, show_default=True,
              help="Jobs each process runs at once.")  # fmt: skip
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Of those, how many sync tasks may run at once, in threads.")  # fmt: skip
@click.option("--kind", type=click.Choice(["async", "sync"]), default="async", show_default=True,
              help="async: `await asyncio.sleep`; sync: `time.sleep`.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
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
    from lanner.bench.io import run_io_benchmark

    if url is not None:
        Console(stderr=True).print(
            f"[yellow]warning:[/] measuring {url}: it should be an empty store; "
            f"the benchmark leaves {jobs} completed jobs in it.",
            highlight=False,
        )
    result = measured(
        lambda progress: run_io_benchmark(
            url, jobs, sleep_ms, concurrency, tasks_per_process, threads, kind, progress
        )
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    Console().print(io_results_view(result))


def io_results_view(result: IoBenchResult) -> Group:
    """The results table, then what was measured, on what."""
    table = Table(
        title=f"lanner io benchmark, {result.jobs:,} {result.kind} jobs of {result.sleep_ms:g} ms"
    )
    table.add_column("measurement")
    table.add_column("result", justify="right")
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
    machine = result.machine
    synchronous = "" if result.synchronous is None else f"synchronous={result.synchronous}  "
    about = Text(
        f"store: {result.url}\n{synchronous}tasks per process: {result.tasks_per_process}  "
        f"threads: {result.threads}  event loop: {result.event_loop}\n"
        f"{machine.platform}, {machine.cpu_count} CPUs\n"
        f"Python {machine.python}, SQLite {machine.sqlite}, lanner {machine.lanner}",
        style="dim",
    )
    return Group(table, about)


@bench.command("kestrel")
@_store_url_option("Engine behind `lanner serve`")
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
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
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
    from lanner.bench.kestrel import run_kestrel_benchmark

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
    for column in ("connections", "lanner serve", "memcached", "ratio", "of peak"):
        table.add_column(column, justify="right")
    for row in result.rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        theirs = "not installed" if row.memcached_per_s is None else f"{row.memcached_per_s:,.0f}/s"
        table.add_row(f"{row.connections:,}", f"{row.lanner_per_s:,.0f}/s", theirs, ratio,
                      f"{row.lanner_per_s / result.peak_per_s:.0%}")  # fmt: skip
    lone = result.lone
    consumer = Text(
        f"one client alone: set {lone.set_ms:.2f} ms, get {lone.get_ms:.2f} ms (medians); "
        f"the engine's own put {lone.engine_put_ms:.2f} ms, pop {lone.engine_pop_ms:.2f} ms\n"
        f"the engine alone, batches of 100 (put_many, pop, complete_many): "
        f"{result.engine_batched_per_s:,.0f} pairs/s\n"
        f"one consumer, get q/t=1000 while a producer sets: "
        f"{result.blocking_consumer_per_s:,.0f} items/s"
    )
    Console().print(Group(table, consumer, _about(result.url, result.machine)))


@bench.command("web")
@_store_url_option("Engine to fill and browse")
@click.option("--jobs", type=BoundedInt(100, limits.MAX_RUN_JOBS), default=100_000,
              show_default=True, help="Jobs in the store while the pages are fetched.")  # fmt: skip
@click.option("--samples", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=20, show_default=True,
              help="Fetches of each page.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def web_command(url: str | None, jobs: int, samples: int, as_json: bool) -> None:
    """Measure the dashboard: engine commands and time per page, on a store of N jobs."""
    try:
        from lanner.bench.web import run_web_benchmark
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
    Console().print(Group(table, _about(result.url, result.machine)))


@bench.command("idle")
@_store_url_option("Store the idle pool serves")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=DEFAULT_CONCURRENCY,
              show_default=True, help="Worker processes in the pool.")  # fmt: skip
@click.option("--seconds", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="How long the idle processes are measured.")  # fmt: skip
@click.option("--samples", type=click.IntRange(min=1), default=20, show_default=True,
              help="Pickup-latency samples, after the idle time.")  # fmt: skip
@click.option("--web", is_flag=True, help="Also measure an idle dashboard (lanner web).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def idle_command(
    url: str | None, concurrency: int, seconds: float, samples: int, web: bool, as_json: bool
) -> None:
    """Measure what an idle pool costs: CPU % of one core per process (supervisor, each
    worker; with --web the dashboard too), then the pickup latency of single jobs."""
    from lanner.bench.idle import run_idle_benchmark

    errors = Console(stderr=True)
    try:
        with exit_on_sigterm(), progress_bar(errors) as bar:
            result = run_idle_benchmark(url, concurrency, seconds, samples, web, RichProgress(bar))
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = Table(title=f"lanner idle pool, {concurrency} processes, {seconds:g} s")
    table.add_column("measurement")
    table.add_column("result", justify="right")
    table.add_row("CPU, supervisor", f"{result.supervisor_cpu_pct:.2f} % of a core")
    for number, cpu in enumerate(result.worker_cpu_pct, 1):
        table.add_row(f"CPU, worker {number}", f"{cpu:.2f} % of a core")
    if result.web_cpu_pct is not None:
        table.add_row("CPU, dashboard (lanner web)", f"{result.web_cpu_pct:.2f} % of a core")
    pickup = result.pickup_ms
    for label, ms in (("p50", pickup.p50), ("p95", pickup.p95), ("max", pickup.max)):
        table.add_row(f"pickup latency {label} ({pickup.count} samples)", f"{ms:.2f} ms")
    Console().print(Group(table, _about(result.url, result.machine)))


def _register_workflow_benchmarks() -> None:
    from lanner.bench.chord_cli import chord_chaos_command, chord_command

    bench.add_command(chord_command)
    bench.add_command(chord_chaos_command)


_register_workflow_benchmarks()


@bench.command("depth")
@_store_url_option("Store to fill")
@click.option("--depths", default="1000,100000,1000000", show_default=True, metavar="N,N,...",
              help="Waiting jobs to measure at, ascending (filled to each in turn).")  # fmt: skip
@click.option("--queues", type=BoundedInt(1, 1000), default=1, show_default=True,
              help="Queues the jobs are spread over.")  # fmt: skip
@click.option("--samples", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=200, show_default=True,
              help="pop + complete (and single put) samples at each depth.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def depth_command(url: str | None, depths: str, queues: int, samples: int, as_json: bool) -> None:
    """Measure an engine with a deep backlog: put_many rate while filling, pop + complete
    and single-put latency, `lanner status` time, bytes per job and RSS at each depth."""
    from lanner.bench.common import bench_store
    from lanner.bench.depth import depth_table, run_depth_bench

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


@bench.command("transactional")
@click.option("--broker", metavar="URL",
              help="Redis or SQS (through the outbox); default: SQLite, the application's "
                   "own database file.")  # fmt: skip
@click.option("-n", "--transactions", type=BoundedInt(2, limits.MAX_RUN_JOBS), default=1000,
              show_default=True, help="Transactions, every other one rolled back.")  # fmt: skip
@click.option("--kill-ms", type=click.FloatRange(min=1), default=100.0, show_default=True,
              help="Each publisher is killed at a random time up to this.")  # fmt: skip
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=DEFAULT_CONCURRENCY,
              show_default=True, help="Worker processes in the pool.")  # fmt: skip
@click.option("--seed", type=int, help="Seed of the kill times.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
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
    from lanner.bench.transactional import run_transactional

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
        table = Table(title=f"lanner transactional publishing, {transactions} transactions")
        table.add_column("measurement")
        table.add_column("result", justify="right")
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


def _add_flow() -> None:
    from lanner.bench.flow import flow_bench

    bench.add_command(flow_bench)


_add_flow()


@bench.command("shards")
@click.option("--url", required=True, metavar="URL",
              help="A Redis Cluster (redis+cluster://...), 2 primaries or more.")  # fmt: skip
@click.option("--jobs", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Jobs put, popped and completed in each layout.")  # fmt: skip
@click.option("--queues", type=click.IntRange(min=1), default=6, show_default=True,
              help="Queues the jobs are spread over.")  # fmt: skip
@click.option("--single", default=None, metavar="URL",
              help="A Redis (redis://...) to run the same work on first (baseline).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def shards_command(url: str, jobs: int, queues: int, single: str | None, as_json: bool) -> None:
    """Measure the Redis CPU per job of each shard of a Redis Cluster, with the queues
    spread over the primaries, then all served by one."""
    from lanner.bench.shards import run_shards_benchmark

    errors = Console(stderr=True)
    try:
        with exit_on_sigterm(), progress_bar(errors) as bar:
            result = run_shards_benchmark(url, jobs, queues, RichProgress(bar), single)
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error
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
    Console().print(Group(table, _about(result.url, result.machine)))

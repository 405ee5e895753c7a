"""`lanner chaos`: run a real worker pool under faults and print one figure line.

    lanner chaos --engine redis -n 10000 --kill-every 2 --stop-at 0.2 --restart-at 0.4 \\
        --outage-at 0.6 --outage-for 60

    lanner chaos --engine sqlite -n 20000 -c 2 -t 50 --kill-every 2 --poison exit,segv

The line is `engine n t lost dup kills stops innocent_failed redelivery_p99 elapsed`;
`--json` prints the whole report instead. With `-t N` each worker process runs N jobs at
once (the tasks are then `async def`, unless `--kind sync`). The exit status is 0 when
the run met every target of issue 10, 1 when it did not (the problems are listed on
standard error), 2 for bad options.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from lanner import limits
from lanner.commands.bounded import BoundedFloat, BoundedInt
from lanner.tools.chaos.workload import KINDS, POISONS

if TYPE_CHECKING:
    from lanner.tools.chaos.config import ChaosConfig
    from lanner.tools.chaos.report import Report

FRACTION = click.FloatRange(0.0, 1.0)
SECONDS = click.FloatRange(min=0.0, min_open=True)


@click.command("chaos")
@click.option(
    "--engine",
    type=click.Choice(["sqlite", "redis"]),
    default="sqlite",
    show_default=True,
    help="A fresh store of this engine (Redis: a private redis-server with AOF).",
)
@click.option("--broker", metavar="URL", help="Use this store instead (no broker faults).")
@click.option(
    "--url-options",
    metavar="QUERY",
    default="",
    help="Options for the pool's broker URL, e.g. 'retries=3&backoff_cap=0.2'.",
)
@click.option("-n", "--jobs", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=10_000,
              show_default=True)  # fmt: skip
@click.option("-c", "--concurrency", type=BoundedInt(1, limits.MAX_PROCESSES), default=4,
              show_default=True)  # fmt: skip
@click.option(
    "-t",
    "--tasks-per-process",
    type=BoundedInt(1, limits.MAX_TASKS_PER_PROCESS),
    default=1,
    show_default=True,
    metavar="N",
    help="Jobs each worker process runs at once (lanner worker -t).",
)
@click.option(
    "--threads",
    type=BoundedInt(1, limits.MAX_THREADS),
    default=1,
    show_default=True,
    metavar="T",
    help="Of those, sync tasks at once, in threads (lanner worker --threads).",
)
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    help="async or sync tasks (default: async when -t > 1, else sync).",
)
@click.option("--batch-size", type=BoundedInt(1, limits.MAX_BATCH_SIZE), default=10,
              show_default=True)  # fmt: skip
@click.option(
    "--sleep",
    type=click.FloatRange(min=0),
    default=0.005,
    show_default=True,
    help="Seconds each normal job works.",
)
@click.option(
    "--lease",
    type=BoundedFloat(0.0, limits.MAX_LEASE_SEC, min_open=True),
    default=30.0,
    show_default=True,
    help="The queue's visibility_timeout_sec.",
)
@click.option(
    "--retry-delay",
    type=BoundedFloat(0, limits.MAX_DELAY_SEC),
    metavar="S",
    help="RETRY_DELAY_MULTIPLE_SEC (default: lanner's).",
)
@click.option(
    "--grace",
    type=BoundedFloat(0, limits.MAX_LEASE_SEC),
    metavar="S",
    help="The engine's grace-period after a lock expires (default: leave it).",
)
@click.option(
    "--poison",
    default=",".join(POISONS),
    show_default=True,
    help="Poison tasks to publish, comma-separated, or 'none'.",
)
@click.option(
    "--time-limit-grace",
    type=BoundedFloat(0, limits.MAX_TIME_LIMIT_GRACE_SEC),
    metavar="S",
    help="TIME_LIMIT_GRACE_SEC (default: 1 s, or the stop + 5 s when a worker is stopped).",
)
@click.option("--poison-copies", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=2,
              show_default=True)  # fmt: skip
@click.option(
    "--kill-every",
    type=SECONDS,
    metavar="S",
    help="kill -9 a worker inside a job every S s while jobs remain.",
)
@click.option(
    "--kill-idle", is_flag=True, help="Kill workers outside a job too (blocked in a pop)."
)
@click.option(
    "--stop-at",
    type=FRACTION,
    metavar="F",
    help="SIGSTOP a worker past its lease when a fraction F of the jobs ended.",
)
@click.option("--stop-for", type=SECONDS, metavar="S", help="Default: lease + grace + 2 s.")
@click.option(
    "--supervisor-kill-at",
    type=FRACTION,
    metavar="F",
    help="kill -9 the supervisor (a reader runs lanner status), then start anew.",
)
@click.option(
    "--supervisor-term-at",
    type=FRACTION,
    metavar="F",
    help="SIGTERM the supervisor, then start a new one.",
)
@click.option("--restart-at", type=FRACTION, metavar="F", help="Redis: kill -9 and restart.")
@click.option(
    "--outage-at",
    type=FRACTION,
    metavar="F",
    help="Redis: away for --outage-for; SQLite: write lock held that long.",
)
@click.option("--outage-for", type=SECONDS, default=60.0, show_default=True, metavar="S")
@click.option(
    "--lock-at",
    type=FRACTION,
    metavar="F",
    help="SQLite: another process holds the write lock for --lock-for.",
)
@click.option("--lock-for", type=SECONDS, default=3.0, show_default=True, metavar="S")
@click.option(
    "--drain-timeout",
    type=SECONDS,
    default=300.0,
    show_default=True,
    metavar="S",
    help="How long the work may take to settle after the last fault.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Keep the run's files (store, ledger, logs) in DIR.",
)
@click.option("--seed", type=int, help="Seed of the fault schedule's random choices.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Also write the whole report as JSON to FILE.",
)
def chaos(
    engine: str,
    broker: str | None,
    url_options: str,
    jobs: int,
    concurrency: int,
    tasks_per_process: int,
    threads: int,
    kind: str | None,
    batch_size: int,
    sleep: float,
    lease: float,
    retry_delay: float | None,
    grace: float | None,
    poison: str,
    time_limit_grace: float | None,
    poison_copies: int,
    kill_every: float | None,
    kill_idle: bool,
    stop_at: float | None,
    stop_for: float | None,
    supervisor_kill_at: float | None,
    supervisor_term_at: float | None,
    restart_at: float | None,
    outage_at: float | None,
    outage_for: float,
    lock_at: float | None,
    lock_for: float,
    drain_timeout: float,
    keep: Path | None,
    seed: int | None,
    as_json: bool,
    report_path: Path | None,
) -> None:
    """Run a real worker pool under faults; account for every job."""
    from lanner import LannerError
    from lanner.tools.chaos.brokers import ChaosError  # here: `lanner --help` need not load them
    from lanner.tools.chaos.config import ChaosConfig, FaultPlan
    from lanner.tools.chaos.workload import WorkloadSpec

    kinds = () if poison.strip() in ("", "none") else tuple(k.strip() for k in poison.split(","))
    config = ChaosConfig(
        engine=engine,
        broker=broker,
        url_options=url_options,
        workload=WorkloadSpec(
            jobs=jobs,
            sleep=sleep,
            concurrency=concurrency,
            tasks_per_process=tasks_per_process,
            threads=threads,
            kind=kind,
            batch_size=batch_size,
            lease=lease,
            poisons=kinds,
            poison_copies=poison_copies,
            time_limit_grace=time_limit_grace,
            retry_delay=retry_delay,
        ),
        faults=FaultPlan(
            kill_every=kill_every,
            kill_idle=kill_idle,
            stop_at=stop_at,
            stop_for=stop_for,
            supervisor_kill_at=supervisor_kill_at,
            supervisor_term_at=supervisor_term_at,
            restart_at=restart_at,
            outage_at=outage_at,
            outage_for=outage_for,
            lock_at=lock_at,
            lock_for=lock_for,
        ),
        grace=grace,
        drain_timeout=drain_timeout,
        folder=keep,
        seed=seed,
    )
    # SIGTERM ends the run as Ctrl-C does: through the harness's clean-up, which stops the
    # pool, the redis-server and whatever the run started.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        config.check()
        report = _run_with_progress(config)
    except (ChaosError, LannerError, ValueError, OSError) as error:
        click.echo(f"lanner chaos: {error}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("lanner chaos: interrupted", err=True)
        sys.exit(130)
    document = json.dumps(report.to_json(), indent=2, default=str)
    if report_path is not None:
        report_path.write_text(document + "\n")
    if as_json:
        click.echo(document)
    else:
        click.echo(report.figure_line())
    problems = report.problems()
    for problem in problems:
        click.echo(f"  problem: {problem}", err=True)
    sys.exit(1 if problems else 0)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run_with_progress(config: ChaosConfig) -> Report:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from lanner.tools.chaos.run import run_chaos

    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"chaos {config.engine}", total=config.workload.jobs, note="")

        def update(ended: int, total: int, note: str) -> None:
            progress.update(task, completed=ended, total=total, note=note)

        return run_chaos(config, progress=update)

"""`lanner demo`: see lanner.demo."""

from __future__ import annotations

import logging

import click
from rich.console import Console

from lanner.demo import run_demo
from lanner.worker import logs


@click.command()
@click.option("-c", "--concurrency", default=2, show_default=True, type=click.IntRange(min=1))
def demo(concurrency: int) -> None:
    """Run a worker pool on a mixed workload in a fresh SQLite database, with live progress."""
    logs.configure(logging.ERROR)
    if not run_demo(Console(), processes=concurrency):
        raise click.ClickException("some demo jobs did not complete")

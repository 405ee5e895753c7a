"""The `lanner bench` command group: each benchmark's command, registered.

The commands live beside their benchmarks (`engine_cli`, `pool_cli`, `servers_cli`,
`chord_cli`, `flow`); the benchmarks themselves are imported when a command runs, so that
`lanner bench --help` does not load multiprocessing and the worker pool. `lanner --help`
loads none of this package (lanner/cli.py).
"""

from __future__ import annotations

import click

from lanner.tools.bench.chord_cli import chord_chaos_command, chord_command
from lanner.tools.bench.engine_cli import (
    depth_command,
    engine_command,
    publish_command,
    shards_command,
)
from lanner.tools.bench.flow import flow_bench
from lanner.tools.bench.pool_cli import (
    idle_command,
    io_command,
    pool_command,
    transactional_command,
)
from lanner.tools.bench.servers_cli import kestrel_command, web_command


@click.group()
def bench() -> None:
    """Measure lanner's performance on this machine."""


for command in (
    engine_command,
    depth_command,
    shards_command,
    publish_command,
    pool_command,
    io_command,
    idle_command,
    transactional_command,
    kestrel_command,
    web_command,
    chord_command,
    chord_chaos_command,
    flow_bench,
):
    bench.add_command(command)

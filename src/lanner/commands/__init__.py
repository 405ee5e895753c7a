"""The `lanner` subcommands, one module per subject; `lanner.cli.COMMANDS` names each
command's module, imported only when that command runs (`lanner --help` imports none).

    common      -A/--app and --broker, loading the App, the session every command opens
    known       the queues and failure groups that exist: a typo is an error, not nothing
    rendering   rich tables in one style, bare JSON output, UTC times
    inspect     status, jobs, job: looking at a store
    failures    failed, retry: failure groups, and putting their jobs back
    queues      pause, unpause: what changes a queue rather than a job
    cancel      cancel: taking jobs away, stopping their tasks if they run
    stats       stats: a queue's per-day wait and run histograms
    flow        flow, schedules: what flow control holds back; the app's schedules
    publish     publish: one run of a task from the command line
    worker      worker: the supervised pool
    demo        demo: a pool at work on a fresh store (the demo itself lives there too)

What takes more than one engine call (retrying a group, listing jobs across queues) is in
`lanner.operations`, so Python code can do it without the CLI; these modules parse
options and render results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click


def register_admin(group: click.Group) -> None:
    """Add the commands on a store (inspect, failures, queues, cancel, publish, stats, flow)
    to `group`."""
    from lanner.commands import cancel, failures, flow, inspect, publish, queues, stats

    for module in (inspect, failures, queues, cancel, publish, stats, flow):
        for command in module.COMMANDS:
            group.add_command(command)

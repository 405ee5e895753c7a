"""The commands on flow control (docs/flow-control.md):

    lanner flow [--json]                      what each concurrency key and rate bucket holds
                                              back now
    lanner schedules [--prune] [--json]       the app's schedules with their next run, and
                                              those the store has that the app no longer
                                              declares (--prune removes them)

`schedules` needs the app (-A): schedules are declared in its code; the store only keeps
their registration, which is what --prune forgets.
"""

from __future__ import annotations

import time
from typing import Any, Final

import click
from rich.console import Console
from rich.text import Text

from lanner import schedules as schedule_store
from lanner.commands.common import connection_options, json_option, session
from lanner.commands.known import require
from lanner.commands.rendering import number, print_json, say, table, text, utc
from lanner.engine import Capability

__all__ = ["COMMANDS"]


@click.command("flow")
@json_option
@connection_options
def flow_command(app_path: str | None, broker: str | None, as_json: bool) -> None:
    """What each concurrency key and rate bucket holds back now."""
    with session(app_path, broker) as app:
        require(app, Capability.FLOW, "flow")
        now = time.time()
        state = app.engine.flow_state(now=now)
    if as_json:
        print_json(
            {
                "keys": [vars_of(key) for key in state.keys],
                "buckets": [vars_of(bucket) for bucket in state.buckets],
            }
        )
        return
    console = Console()
    if not state.keys and not state.buckets:
        console.print(Text("no flow control holds anything now"))
        return
    if state.keys:
        rows: list[tuple[object, ...]] = [(k.key, k.running, k.cap, k.held) for k in state.keys]
        columns = [text("key", no_wrap=True), number("running"), number("cap"), number("held")]
        console.print(table(columns, rows, title="concurrency keys"))
    if state.buckets:
        rows = [
            (b.bucket, f"{b.limit}/{b.period:g} s", b.recent, b.held,
             "now" if b.next_at <= now else utc(b.next_at, " UTC"))
            for b in state.buckets
        ]  # fmt: skip
        columns = [
            text("bucket", no_wrap=True), text("limit"), number("last period"), number("held"),
            text("room at", no_wrap=True),
        ]  # fmt: skip
        console.print(table(columns, rows, title="rate limits"))


def vars_of(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


@click.command("schedules")
@click.option("--prune", is_flag=True, help="Remove the schedules the app no longer declares.")
@json_option
@connection_options
def schedules_command(app_path: str | None, broker: str | None, prune: bool, as_json: bool) -> None:
    """The app's schedules (@app.periodic) with their next run, and the store's others."""
    with session(app_path, broker, create=True) as app:  # the schedules are the app's
        for module in app.settings.imports:
            __import__(module)
        now = time.time()
        supported = schedule_store.supported(app.engine)
        known = schedule_store.stored(app.engine) if supported else {}
        gone = sorted(set(known) - set(app.schedules))
        if prune:
            for name in gone:
                schedule_store.remove(app.engine, name, known[name], now)
        declared = schedule_store.next_runs(app, now)
    listed: list[dict[str, Any]] = [
        {"name": s.name, "task": s.task.name, "when": _when(s), "next_run": at,
         "registered": s.name in known, "catch_up": s.catch_up}
        for s, at in declared
    ]  # fmt: skip
    others = [{"name": name, "when": schedule_store.describe(known[name])} for name in gone]
    if as_json:
        print_json({"schedules": listed, "not_declared": [] if prune else others})
        return
    console = Console()
    if listed:
        rows = [
            (s["name"], s["when"], utc(s["next_run"], " UTC"), "yes" if s["registered"] else "no")
            for s in listed
        ]
        columns = [
            text("schedule", no_wrap=True), text("when", no_wrap=True),
            text("next run", no_wrap=True),
            text("registered"),
        ]  # fmt: skip
        console.print(table(columns, rows, title="schedules"))
    else:
        console.print(Text("the app declares no schedules"))
    if not supported and listed:
        say(f"the {app.engine.name} engine cannot hold schedules: pools will not run them")
    if others:
        verb = "removed" if prune else "not declared any more (--prune removes them)"
        say(f"{verb}: " + ", ".join(f"{o['name']} ({o['when']})" for o in others))


def _when(schedule: schedule_store.Schedule) -> str:
    return schedule_store.describe({"spec": schedule.spec()})


COMMANDS: Final = (flow_command, schedules_command)

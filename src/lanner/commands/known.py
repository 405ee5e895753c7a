"""What a command's arguments may name: the queues and failure groups that exist.

A name that exists nowhere is a typo, not an empty answer: `lanner pause emials` would
pause a queue no worker serves, `lanner retry Tiemout` would retry nothing, both saying
all went well. These checks make it one line naming what does exist, and exit status 1.

A queue exists if the store has seen it (`queues()`: a job was put there, or it was
paused), if it is paused (Redis keeps paused queues apart from the queues it has seen),
or if the app declares it: its queue config, or the queue of one of its tasks
(`App.served_queues`), so that a queue can be paused before its first job arrives. A
failure group exists while it holds a failed job. A command the engine lacks is refused
as such first (`require`): on SQS `lanner pause` is unsupported whatever the name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import click

from lanner.checks import names
from lanner.engine import Capability
from lanner.errors import Unsupported

if TYPE_CHECKING:
    from lanner.app import App

__all__ = ["require", "require_group", "require_queues"]

SHOWN_AT_MOST: Final = 12
"""How many existing names an error lists; past that it says how many there are."""


def require(app: App, capability: Capability, command: str) -> None:
    """Refuse `command` as the engine would, if it lacks `capability`."""
    engine = app.engine
    if capability not in engine.capabilities:
        raise Unsupported(engine.name, command, capability.value)


def require_queues(app: App, wanted: Sequence[str]) -> None:
    """Raise a one-line error naming the queues of `wanted` that exist nowhere."""
    names.queue_names(wanted)  # a name that breaks the naming rule says that first
    declared = {queue.name for queue in app.served_queues()}
    unknown = [name for name in wanted if name not in declared]
    if not unknown:
        return
    engine = app.engine
    seen = {queue.name for queue in engine.queues()}
    unknown = [name for name in unknown if name not in seen]
    unknown = [name for name in unknown if not engine.queue_counts(name).paused]
    if unknown:
        noun = "queue" if len(unknown) == 1 else "queues"
        raise click.ClickException(
            f"no {noun} {quoted(unknown)} ({known(declared | seen, 'status')})"
        )


def require_group(groups: Mapping[str, int], group: str) -> None:
    """Raise a one-line error if no failed job is in `group` (`groups`: failed_groups())."""
    if group not in groups:
        found = known(groups, "failed") if groups else "no job has failed"
        raise click.ClickException(f"no failure group {group!r} ({found})")


def quoted(values: Iterable[str]) -> str:
    return ", ".join(repr(value) for value in values)


def known(found: Iterable[str], lister: str) -> str:
    """`known: a, b, c`, or how many are known (and the `lanner` command that lists them)
    when that list would be long."""
    ordered = sorted(found)
    if len(ordered) > SHOWN_AT_MOST:
        return f"{len(ordered)} known: lanner {lister} lists them"
    return f"known: {', '.join(ordered)}" if ordered else "none is known"

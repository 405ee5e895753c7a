"""The argument checks of the recurring templates' commands: `recur` and `recur_update`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from lanner.checks.names import label, queue_name, unique_labels
from lanner.checks.values import delay, integer, interval, json_text, now
from lanner.errors import MalformedArgument

RECUR_FIELDS: Final = ("priority", "interval", "retries", "data", "klass", "queue", "backlog")
"""What `recur_update` can change."""


class Recur(NamedTuple):
    """A recurring template; its first run is due at `now + offset`."""

    queue: str
    jid: str
    klass: str
    data: str
    interval: float
    offset: float
    priority: int
    tags: list[str]
    retries: int
    backlog: int
    now: float


def recur(
    queue: object,
    jid: object,
    klass: object,
    data: object,
    every: object,
    offset: object,
    priority: object,
    tags: object,
    retries: object,
    backlog: object,
    when: float | None,
    limit: int,
) -> Recur:
    return Recur(
        queue_name(queue),
        label(jid, "jid"),
        label(klass, "klass"),
        json_text(data, "data", limit),
        interval(every),
        delay(offset, "offset"),
        integer(priority, "priority"),
        unique_labels(tags, "tags"),  # type: ignore[arg-type]
        integer(retries, "retries", 0),
        integer(backlog, "backlog", 0),
        now(when),
    )


class RecurUpdate(NamedTuple):
    jid: str
    changes: dict[str, str | int | float]  # field of RECUR_FIELDS -> checked value
    now: float


def recur_update(jid: object, changes: object, when: float | None, limit: int) -> RecurUpdate:
    checked_jid = label(jid, "jid")
    if not isinstance(changes, Mapping):
        raise MalformedArgument(f"changes must be a mapping, not {type(changes).__name__}")
    unknown = sorted(str(key) for key in set(changes) - set(RECUR_FIELDS))
    if unknown:
        raise MalformedArgument(
            f"recur_update(): unknown field(s) {', '.join(unknown)}; "
            f"known: {', '.join(RECUR_FIELDS)}"
        )
    checked: dict[str, str | int | float] = {}
    for key, value in changes.items():
        if key == "priority":
            checked[key] = integer(value, key)
        elif key in ("retries", "backlog"):
            checked[key] = integer(value, key, 0)
        elif key == "interval":
            checked[key] = interval(value)
        elif key == "data":
            checked[key] = json_text(value, "data", limit)
        elif key == "klass":
            checked[key] = label(value, "klass")
        else:
            checked[key] = queue_name(value)
    return RecurUpdate(checked_jid, checked, now(when))

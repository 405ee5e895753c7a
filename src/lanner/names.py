"""The one naming rule every engine applies, and the argument checks commands share.

Names are rejected, never rewritten: `my-app` and `myapp` must stay two queues.
Queue names fit inside SQS's 80-character limit with room for engine suffixes, and
contain nothing that is special in SQL, Redis glob patterns, file names or URLs.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from lanner.errors import InvalidName, MalformedArgument, PayloadTooLarge

QUEUE_NAME_RULE: Final = "a letter, then up to 63 letters, digits, '_' or '-'"
_QUEUE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# Jids, workers, groups and tags are identifiers chosen by programs, not by the naming rule
# of queues: any printable text without control characters, bounded in length.
_LABEL: Final = re.compile(r"[^\x00-\x1f\x7f]{1,256}")


def queue_name(value: object, what: str = "queue") -> str:
    """Return `value` if it is a valid queue name, else raise `InvalidName`."""
    if not isinstance(value, str):
        raise InvalidName(f"{what} name must be a str, not {type(value).__name__}")
    if _QUEUE_NAME.fullmatch(value) is None:
        raise InvalidName(f"invalid {what} name {value!r}: it must be {QUEUE_NAME_RULE}")
    return value


def queue_names(values: Sequence[object]) -> list[str]:
    return [queue_name(v) for v in _sequence(values, "queues")]


def label(value: object, what: str) -> str:
    """Return `value` if it is a valid jid, worker, group, klass or tag."""
    if not isinstance(value, str):
        raise MalformedArgument(f"{what} must be a str, not {type(value).__name__}")
    if _LABEL.fullmatch(value) is None:
        raise InvalidName(
            f"invalid {what} {value!r}: it must be 1 to 256 characters without control characters"
        )
    return value


def labels(values: Sequence[object], what: str) -> list[str]:
    return [label(v, what) for v in _sequence(values, what)]


def unique_labels(values: Sequence[object], what: str) -> list[str]:
    """Like `labels`, with duplicates dropped and first-seen order kept."""
    return list(dict.fromkeys(labels(values, what)))


def _sequence(values: object, what: str) -> Sequence[object]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise MalformedArgument(f"{what} must be a list of str, not {type(values).__name__}")
    return values


def integer(value: object, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedArgument(f"{what} must be an int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise MalformedArgument(f"{what} must be >= {minimum}, not {value}")
    return value


def seconds(value: object, what: str) -> float:
    """A finite, non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise MalformedArgument(f"{what} must be a finite number >= 0, not {value}")
    return float(value)


def timestamp(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MalformedArgument(f"now must be a finite number (a Unix time), not {value!r}")
    return float(value)


def json_text(value: object, what: str, limit: int) -> str:
    """Return `value` if it is JSON text of at most `limit` UTF-8 bytes."""
    if not isinstance(value, str):
        raise MalformedArgument(f"{what} must be JSON text (a str), not {type(value).__name__}")
    size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PayloadTooLarge(f"{what} is {size} bytes; this engine accepts at most {limit}")
    try:
        _STRICT_JSON.decode(value)
    except ValueError as error:
        raise MalformedArgument(f"{what} is not valid JSON: {error}") from None
    return value


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity, which JSON (and other languages' clients) do not.
    raise ValueError(f"{name} is not JSON")


# One decoder for every check: json.loads with an option builds a new one per call.
_STRICT_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant)


def now(value: float | None) -> float:
    """The `now` of a command: the current time when None, else a checked timestamp."""
    return time.time() if value is None else timestamp(value)


def message(value: object) -> str:
    """A failure message: any text (tracebacks included)."""
    if not isinstance(value, str):
        raise MalformedArgument(f"message must be a str, not {type(value).__name__}")
    return value


def interval(value: object) -> float:
    """A recurring job's interval: a finite number of seconds above 0."""
    seconds_ = seconds(value, "interval")
    if seconds_ <= 0:
        raise MalformedArgument("interval must be > 0 seconds")
    return seconds_


RECUR_FIELDS: Final = ("priority", "interval", "retries", "data", "klass", "queue", "backlog")


def recur_changes(changes: object, max_data_bytes: int) -> dict[str, str | int | float]:
    """The checked `recur_update` changes (field -> value), or MalformedArgument."""
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
            checked[key] = json_text(value, "data", max_data_bytes)
        elif key == "klass":
            checked[key] = label(value, "klass")
        else:
            checked[key] = queue_name(value)
    return checked


class CheckedPut(NamedTuple):
    """One put's arguments after `put_arguments` (None: keep the job's value on a move)."""

    queue: str
    jid: str
    klass: str
    data: str
    delay: float
    priority: int | None
    tags: list[str] | None
    retries: int | None
    depends: list[str] | None


def put_arguments(
    queue: object,
    jid: object,
    klass: object,
    data: object,
    delay: object,
    priority: object,
    tags: object,
    retries: object,
    depends: object,
    max_data_bytes: int,
) -> CheckedPut:
    """One put's arguments, checked. (A tuple, not a NewJob: this is on the hot path of
    put_many, and a frozen dataclass takes four times as long to build.)"""
    return CheckedPut(
        queue_name(queue),
        label(jid, "jid"),
        label(klass, "klass"),
        json_text(data, "data", max_data_bytes),
        seconds(delay, "delay"),
        None if priority is None else integer(priority, "priority"),
        None if tags is None else unique_labels(tags, "tags"),  # type: ignore[arg-type]
        None if retries is None else integer(retries, "retries", 0),
        None if depends is None else unique_labels(depends, "depends"),  # type: ignore[arg-type]
    )

"""The one naming rule every engine applies: queue names, and the labels programs choose.

Names are rejected, never rewritten: `my-app` and `myapp` must stay two queues.
Queue names fit inside SQS's 80-character limit with room for engine suffixes, and
contain nothing that is special in SQL, Redis glob patterns, file names or URLs. A fanout
child (Kestrel's `parent+child`, engines with the FANOUT capability) is two such names
joined by one '+'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from lanner.errors import InvalidName, MalformedArgument

QUEUE_NAME_RULE: Final = (
    "a letter, then up to 63 letters, digits, '_' or '-' (a fanout child: two of those "
    "joined by '+')"
)
_QUEUE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}(?:\+[A-Za-z][A-Za-z0-9_-]{0,63})?")
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


def is_queue_name(value: str) -> bool:
    return _QUEUE_NAME.fullmatch(value) is not None


def fanout_parent(queue: str) -> str | None:
    """The parent of a fanout child queue `parent+child`, or None for a plain queue."""
    parent, plus, _ = queue.partition("+")
    return parent if plus else None


def queue_names(values: Sequence[object]) -> list[str]:
    return [queue_name(v) for v in sequence(values, "queues")]


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
    return [label(v, what) for v in sequence(values, what)]


def unique_labels(values: Sequence[object], what: str) -> list[str]:
    """Like `labels`, with duplicates dropped and first-seen order kept."""
    return list(dict.fromkeys(labels(values, what)))


def sequence(values: object, what: str) -> Sequence[object]:
    """`values` if it is a list or tuple of things (a str is not: it would be split)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise MalformedArgument(f"{what} must be a list of str, not {type(values).__name__}")
    return values

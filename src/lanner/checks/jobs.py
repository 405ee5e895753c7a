"""The checks of the commands on jobs named by jid: cancel, timeout, multiget, priority,
wait, depends_add/remove, tag_add/remove (and the recurring templates' tags), log, with a
progress entry's data (`engine/jobs.py`'s commands)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import NamedTuple

from lanner.checks.names import label, labels, unique_labels
from lanner.checks.values import integer, now, seconds, timestamp
from lanner.errors import MalformedArgument
from lanner.job import MAX_PROGRESS_MESSAGE, PROGRESS_ENTRY


# -- managing jobs ------------------------------------------------------------------------
class Jids(NamedTuple):
    """cancel, timeout (each jid once) and multiget (in the order asked)."""

    jids: list[str]
    now: float


def jids(values: object, when: float | None, *, unique: bool = True) -> Jids:
    check = unique_labels if unique else labels
    return Jids(check(values, "jids"), now(when))  # type: ignore[arg-type]


class JobPriority(NamedTuple):
    jid: str
    priority: int
    now: float


def priority(jid: object, value: object, when: float | None) -> JobPriority:
    return JobPriority(label(jid, "jid"), integer(value, "priority"), now(when))


class Wait(NamedTuple):
    jid: str
    timeout: float
    now: float | None  # None: the clock, read again as the wait goes on


def wait(jid: object, timeout: object, when: float | None) -> Wait:
    return Wait(
        label(jid, "jid"), seconds(timeout, "timeout"), None if when is None else timestamp(when)
    )


# -- optional capabilities ----------------------------------------------------------------
class Depends(NamedTuple):
    """depends_add, depends_remove (jids None: all of them)."""

    jid: str
    jids: list[str] | None
    now: float


def depends(jid: object, values: object, when: float | None) -> Depends:
    checked = None if values is None else unique_labels(values, "jids")  # type: ignore[arg-type]
    return Depends(label(jid, "jid"), checked, now(when))


class Retag(NamedTuple):
    """tag_add, tag_remove, recur_tag, recur_untag."""

    jid: str
    tags: list[str]
    now: float


def retag(jid: object, tags: object, when: float | None) -> Retag:
    return Retag(label(jid, "jid"), unique_labels(tags, "tags"), now(when))  # type: ignore[arg-type]


class Log(NamedTuple):
    jid: str
    message: str
    details: dict[str, object]  # JSON values; never `what` or `when`
    now: float


def log(jid: object, text: object, data: object, when: float | None) -> Log:
    checked_jid, checked_message = label(jid, "jid"), label(text, "message")
    if data is not None and not isinstance(data, Mapping):
        raise MalformedArgument(f"log data must be a mapping, not {type(data).__name__}")
    details = {str(k): v for k, v in (data or {}).items() if k not in ("what", "when")}
    if checked_message == PROGRESS_ENTRY:
        details = progress(details)
    try:
        json.dumps(details, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise MalformedArgument(f"log data is not JSON-serialisable: {error}") from None
    return Log(checked_jid, checked_message, details, now(when))


def progress(details: Mapping[str, object]) -> dict[str, object]:
    """A progress entry's data: `fraction` a number from 0 to 1 (rounded to 4 places, so
    that every engine writes it alike), `message` text of at most MAX_PROGRESS_MESSAGE
    characters, nothing else."""
    extra = sorted(set(details) - {"fraction", "message"})
    if extra:
        raise MalformedArgument(f"a progress entry takes fraction and message, not {extra}")
    fraction = details.get("fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise MalformedArgument(f"progress fraction must be a number, not {fraction!r}")
    if not math.isfinite(fraction) or not 0 <= fraction <= 1:
        raise MalformedArgument(f"progress fraction must be from 0 to 1, not {fraction!r}")
    text = details.get("message", "")
    if not isinstance(text, str):
        raise MalformedArgument(f"progress message must be text, not {type(text).__name__}")
    if len(text) > MAX_PROGRESS_MESSAGE:
        raise MalformedArgument(
            f"progress message is {len(text)} characters, over {MAX_PROGRESS_MESSAGE}"
        )
    rounded = round(float(fraction), 4)
    return {"fraction": int(rounded) if rounded.is_integer() else rounded, "message": text}

"""The value rules of engine arguments: counts, seconds, times, JSON text, messages.

Each check returns the value (as the type engines store) or raises `MalformedArgument`
(`PayloadTooLarge` for JSON text over the limit, `TimeOutOfRange` for a delay or a time
past its bound in `lanner.limits`) naming the argument. Names and labels follow their own
rule, in `lanner.checks.names`.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Final

from lanner.checks.names import label
from lanner.errors import MalformedArgument, PayloadTooLarge, TimeOutOfRange
from lanner.limits import MAX_DELAY_SEC, MAX_INTEGER, MAX_TIMESTAMP


def integer(value: object, what: str, minimum: int | None = None) -> int:
    """An int every engine stores exactly: at most 14 digits (one rule for all)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedArgument(f"{what} must be an int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise MalformedArgument(f"{what} must be >= {minimum}, not {value}")
    if not -MAX_INTEGER <= value <= MAX_INTEGER:
        raise MalformedArgument(f"{what} must have at most 14 digits (±{MAX_INTEGER}), not {value}")
    return value


def seconds(value: object, what: str) -> float:
    """A finite, non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise MalformedArgument(f"{what} must be a finite number >= 0, not {value}")
    return float(value)


def delay(value: object, what: str = "delay") -> float:
    """Seconds until a job is due: `seconds`, at most MAX_DELAY_SEC (ten years), so that
    every engine stores the due date and every display shows it."""
    checked = seconds(value, what)
    if checked > MAX_DELAY_SEC:
        raise TimeOutOfRange(
            f"{what} must be at most {MAX_DELAY_SEC:.0f} seconds (ten years), not {value!r}"
        )
    return checked


def lease(value: object, what: str) -> float:
    """A lock's length (`heartbeat`, `<queue>-heartbeat`, `grace-period`): a number of
    seconds (below 0 too, as qless takes it: a lock already run out), at most
    MAX_DELAY_SEC, so that every engine stores when it runs out and every display shows it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MalformedArgument(f"{what} must be a finite number of seconds, not {value!r}")
    if value > MAX_DELAY_SEC:
        raise TimeOutOfRange(
            f"{what} must be at most {MAX_DELAY_SEC:.0f} seconds (ten years), not {value!r}"
        )
    return float(value)


def timestamp(value: object, what: str = "now") -> float:
    """A Unix time, up to MAX_TIMESTAMP (the end of year 9999)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MalformedArgument(f"{what} must be a finite number (a Unix time), not {value!r}")
    if value > MAX_TIMESTAMP:
        raise TimeOutOfRange(
            f"{what} must be a Unix time up to {MAX_TIMESTAMP:.0f} (year 9999), not {value!r}"
        )
    return float(value)


def now(value: float | None) -> float:
    """The `now` of a command: the current time when None, else a checked timestamp."""
    return time.time() if value is None else timestamp(value)


class CodecJSON(str):
    """JSON text that lanner's JSON codec made (`lanner.codec`), which only it makes:
    the standard library's encoder with `allow_nan=False` and ASCII output, so always
    JSON that `strict_json` reads. `json_text` measures it instead of reading it again."""

    __slots__ = ()


# A codec's text with at most this many opening brackets nests no deeper than that, well
# within what Python's decoder follows; one with more is read as any other text.
_SHALLOW: Final = 100


def json_text(value: object, what: str, limit: int) -> str:
    """Return `value` if it is JSON text of at most `limit` UTF-8 bytes (as a plain str)."""
    if type(value) is CodecJSON:
        # A plain copy: sqlite3 binds a str subclass only after looking for an adapter.
        value = str.__str__(value)
        if len(value) <= limit and value.count("[") + value.count("{") <= _SHALLOW:
            return value  # ASCII, so its length is its size
    if not isinstance(value, str):
        raise MalformedArgument(f"{what} must be JSON text (a str), not {type(value).__name__}")
    size = utf8_size(value)
    if size > limit:
        raise PayloadTooLarge(f"{what} is {size} bytes; this engine accepts at most {limit}")
    strict_json(value, what)
    return value


def utf8_size(text: str) -> int:
    """The size of `text` in UTF-8 bytes, as engines' limits count it."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def strict_json(text: str, what: str) -> Any:
    """Decode JSON text as other languages' clients would (no NaN or Infinity), or raise
    `MalformedArgument`; nesting Python's decoder cannot follow is refused, not a crash."""
    try:
        return _STRICT_JSON.decode(text)
    except ValueError as error:
        raise MalformedArgument(f"{what} is not valid JSON: {error}") from None
    except RecursionError:
        raise MalformedArgument(f"{what} is JSON nested too deeply to be read") from None


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity, which JSON (and other languages' clients) do not.
    raise ValueError(f"{name} is not JSON")


# One decoder for every check: json.loads with an option builds a new one per call.
_STRICT_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant)


def optional_data(value: object, limit: int) -> str | None:
    """Job data that replaces the job's own, or None to keep it."""
    return None if value is None else json_text(value, "data", limit)


def message(value: object) -> str:
    """A failure message: any text (tracebacks included)."""
    if not isinstance(value, str):
        raise MalformedArgument(f"message must be a str, not {type(value).__name__}")
    return value


def interval(value: object) -> float:
    """A recurring job's interval: a number of seconds above 0, at most MAX_DELAY_SEC."""
    checked = delay(value, "interval")
    if checked <= 0:
        raise MalformedArgument("interval must be > 0 seconds")
    return checked


def worker_or_anyone(value: object) -> str:
    """The worker a put names, or '' for none."""
    return "" if value == "" else label(value, "worker")

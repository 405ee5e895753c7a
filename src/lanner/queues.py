"""Queue configuration: which queues a worker serves, and how (Kale's queue config YAML).

A `QueueConfig` holds Kale's six per-queue fields and lanner's own (a concurrency cap, a
retry budget, and Kestrel's bounds on what the queue may hold). `load_queue_config`
reads them from a YAML file in any of three layouts:

    high:                       # Kale's layout: key -> queue; the key is only a label
      name: high
      priority: 100
      ...

    - name: high                # a list of queues
      priority: 100

    queues:                     # the list under a top-level `queues` key
      - name: high
        priority: 100

Kale requires all six fields; lanner requires `name` and `priority` and takes the rest from
the `QueueConfig` defaults. Unknown fields and duplicate names are errors, so a typo never
passes silently. Every error is a `ConfigError` whose message says where the problem is:
`queues.yaml: queue 'high': batch_size must be an int >= 1, not '10x'`.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Final

from lanner import limits
from lanner.checks.names import queue_name
from lanner.errors import ConfigError, InvalidName

if TYPE_CHECKING:
    import yaml

__all__ = [
    "DEFAULT_QUEUES",
    "QueueConfig",
    "load_queue_config",
    "queues_from_names",
]


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """How a worker serves one queue. Invalid values raise `ConfigError`.

    `priority`: lottery tickets; higher is more important (Kale suggests 1..100).
    `batch_size`: jobs fetched per pop.
    `visibility_timeout_sec`: the lock a batch gets, which is the batch's SLA: every job of
    the batch must finish within it (Kale's "task SLA" is visibility_timeout_sec / batch_size).
    Its default, 300 s, leaves room for a task with the default time limit of 60 s.
    `long_poll_time_sec`: how long a pop blocks on an empty queue.
    `num_iterations`: batches to fetch before the worker selects a queue again.
    `max_concurrency`: at most this many jobs of the queue run at once across all workers
    (the engine config `<queue>-max-concurrency`); None leaves the engine's setting alone.
    `retries`: the retry budget of this queue's tasks that do not set their own.
    `max_items`, `max_size` (bytes), `max_item_size` (bytes), `max_age` (seconds),
    `discard_old_when_full`: Kestrel's bounds (engine config `<queue>-max-items`, ...;
    docs/kestrel.md), applied by every put whoever makes it; None leaves the engine's
    setting alone.
    `rate_limit`: FLOW, at most this many runs of the queue's jobs start per period
    ("100/m"), across all workers (docs/flow-control.md); None: no limit.
    """

    name: str
    priority: int = 1
    batch_size: int = 10
    visibility_timeout_sec: float = 300.0
    long_poll_time_sec: float = 1.0
    num_iterations: int = 10
    max_concurrency: int | None = None
    retries: int | None = None
    max_items: int | None = None
    max_size: int | None = None
    max_item_size: int | None = None
    max_age: float | None = None
    discard_old_when_full: bool | None = None
    rate_limit: str | None = None

    def __post_init__(self) -> None:
        try:
            queue_name(self.name)
        except InvalidName as error:
            raise ConfigError(str(error), field="name") from None
        for name, minimum, maximum in (
            ("priority", 1, limits.MAX_QUEUE_PRIORITY),
            ("batch_size", 1, limits.MAX_BATCH_SIZE),
            ("num_iterations", 1, limits.MAX_NUM_ITERATIONS),
        ):
            _check_int(self.name, name, getattr(self, name), minimum, maximum)
        for name, minimum in (
            ("max_concurrency", 1),
            ("retries", 0),
            ("max_items", 0),
            ("max_size", 0),
            ("max_item_size", 0),
        ):
            if getattr(self, name) is not None:
                _check_int(self.name, name, getattr(self, name), minimum, limits.MAX_INTEGER)
        if self.max_age is not None:
            max_age = _check_number(self.name, "max_age", self.max_age, False, limits.MAX_DELAY_SEC)
            object.__setattr__(self, "max_age", max_age)
        if self.rate_limit is not None:
            from lanner.flow import parse_rate

            try:
                parse_rate(self.rate_limit)
            except ConfigError as error:
                raise ConfigError(str(error), queue=self.name, field="rate_limit") from None
        if self.discard_old_when_full is not None and not isinstance(
            self.discard_old_when_full, bool
        ):
            raise ConfigError(
                f"discard_old_when_full must be true or false, not {self.discard_old_when_full!r}",
                queue=self.name,
                field="discard_old_when_full",
            )
        for name, positive, longest in (
            ("visibility_timeout_sec", True, limits.MAX_LEASE_SEC),
            ("long_poll_time_sec", False, limits.MAX_LONG_POLL_SEC),
        ):
            value = _check_number(self.name, name, getattr(self, name), positive, longest)
            object.__setattr__(self, name, value)

    def limits(self) -> dict[str, int | float]:
        """The engine config keys of the bounds this queue sets, and their values."""
        given = {
            "max-items": self.max_items,
            "max-size": self.max_size,
            "max-item-size": self.max_item_size,
            "max-age": self.max_age,
            "discard-old-when-full": self.discard_old_when_full,
        }
        return {f"{self.name}-{key}": int(v) if isinstance(v, bool) else v
                for key, v in given.items() if v is not None}  # fmt: skip


def _check_int(queue: str, name: str, value: object, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"{name} must be an int >= {minimum}, not {value!r}", queue=queue, field=name
        )
    _at_most(queue, name, value, maximum)


def _check_number(queue: str, name: str, value: object, positive: bool, maximum: float) -> float:
    bound = "> 0" if positive else ">= 0"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        raise ConfigError(
            f"{name} must be a finite number {bound}, not {value!r}", queue=queue, field=name
        )
    _at_most(queue, name, value, maximum)
    return float(value)


def _at_most(queue: str, name: str, value: float, maximum: float) -> None:
    """The upper bound of a field (lanner.limits): a typo or a wrong unit, not a sane size."""
    if value > maximum:
        raise ConfigError(
            f"{name} must be at most {maximum:.0f}, not {value!r}", queue=queue, field=name
        )


QUEUE_FIELDS: Final = tuple(f.name for f in fields(QueueConfig))
"""The fields a queue may have in a config file."""
_REQUIRED: Final = ("name", "priority")

DEFAULT_QUEUES: Final = (QueueConfig("default"),)
"""What a worker serves when no queues are configured: `default`, priority 1."""


def load_queue_config(path: str | os.PathLike[str]) -> tuple[QueueConfig, ...]:
    """Read queues from a YAML file; sorted by priority, highest first, ties in file order."""
    source = os.fspath(path)
    try:
        data = Path(source).read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except OSError as error:
        raise ConfigError(
            f"cannot read the file: {error.strerror or error}", source=source
        ) from None
    import yaml  # here: a process that reads no queue file (most workers) need not load it

    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as error:
        raise ConfigError(f"not valid YAML: {_yaml_problem(error)}", source=source) from None
    queues: list[QueueConfig] = []
    seen: dict[str, str] = {}
    for where, entry in _entries(document, source):
        queue = _queue(where, entry, source)
        if queue.name in seen:
            raise ConfigError(
                f"defined twice ({seen[queue.name]} and {where})", source=source, queue=queue.name
            )
        seen[queue.name] = where
        queues.append(queue)
    return tuple(sorted(queues, key=lambda q: -q.priority))


def _yaml_problem(error: yaml.YAMLError) -> str:
    import yaml

    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        context = ""
        if error.context and error.context_mark is not None:
            context = f" ({error.context} from line {error.context_mark.line + 1})"
        return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}{context}"
    return str(error)


def _entries(document: object, source: str) -> list[tuple[str, object]]:
    """The queue mappings of a parsed file, each with where it is, for messages."""
    if isinstance(document, dict) and isinstance(document.get("queues"), list):
        others = sorted(repr(key) for key in document if key != "queues")
        if others:
            raise ConfigError(
                f"unexpected top-level keys next to 'queues': {', '.join(others)}", source=source
            )
        document = document["queues"]
    if isinstance(document, list):
        entries = [(f"queue #{n}", entry) for n, entry in enumerate(document, 1)]
    elif isinstance(document, dict):
        entries = [(f"key {key!r}", entry) for key, entry in document.items()]
    else:
        raise ConfigError(
            "expected a mapping of queues (Kale's layout), a list of queues or 'queues: [...]', "
            f"not {_kind(document)}",
            source=source,
        )
    if not entries:
        raise ConfigError("the file defines no queues", source=source)
    return entries


def _queue(where: str, entry: object, source: str) -> QueueConfig:
    if not isinstance(entry, dict):
        raise ConfigError(
            f"{where} must be a mapping of queue fields, not {_kind(entry)}", source=source
        )
    name = entry.get("name")
    try:
        queue: str | None = queue_name(name)
    except InvalidName:
        queue = None

    def error(problem: str, field: str | None) -> ConfigError:
        # A queue is named by its name when it has a valid one, else by where it is.
        problem = problem if queue is not None else f"{where}: {problem}"
        return ConfigError(problem, source=source, queue=queue, field=field)

    for key in entry:
        if key not in QUEUE_FIELDS:
            close = difflib.get_close_matches(str(key), QUEUE_FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise error(
                f"unknown field {key!r}{hint}; the fields are {', '.join(QUEUE_FIELDS)}", str(key)
            )
    for required in _REQUIRED:
        if required not in entry:
            raise error(f"missing required field {required!r}", required)
    try:
        return QueueConfig(**entry)
    except ConfigError as problem:
        raise error(problem.problem, problem.field) from None


def _kind(value: object) -> str:
    if value is None:
        return "nothing (an empty document or null)"
    for kind, described in ((dict, "a mapping"), (list, "a list"), (str, "a string")):
        if isinstance(value, kind):
            return described
    return type(value).__name__


def queues_from_names(names: Sequence[str]) -> tuple[QueueConfig, ...]:
    """Queues for a command line such as `lanner worker -Q high,default,low` (already split).

    The queues keep the given order, and their priorities descend with it: of n names the
    first gets priority n and the last priority 1 (`high` 3, `default` 2, `low` 1). Every
    other field takes its `QueueConfig` default. Use a queue config file for anything else.
    """
    if isinstance(names, str):
        raise ConfigError(f"queue names must be a list of str, not a str ({names!r}); split it")
    if not names:
        raise ConfigError("no queue names given")
    count = len(names)
    queues = tuple(QueueConfig(name, priority=count - n) for n, name in enumerate(names))
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"queue names given more than once: {', '.join(repeated)}")
    return queues

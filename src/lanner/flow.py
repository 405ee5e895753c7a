"""FLOW at publish: a task's rate limits and concurrency key made into the job's `Flow`.

`@app.task(rate_limit="100/m", rate_key=..., concurrency_key=..., max_concurrency=N,
fair_key=...)`, the
same names as Kale-style `Task` class attributes, and `.options(...)` per publish; a
queue's `rate_limit` (queue config) adds a limit shared by every job of the queue. A key
is a string, or a callable given the run's arguments by name (`lambda user_id, **_:
user_id`), whose value (made a str) names the key: jobs naming the same key share its limit and its
slots, whatever their task. Without a key, a task's limit and cap are its own (the key is
the task's name). A `fair_key` makes the queue's jobs of different keys take turns. The
store enforces them all (docs/flow-control.md); an engine that cannot (SQS: no rate
limits, concurrency keys or debounce; Redis Cluster for now) refuses the publish in one
line naming the option (`refuse_unheld`), before anything is sent.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from lanner import limits
from lanner.checks.names import label
from lanner.engine.capabilities import Capability
from lanner.errors import ConfigError, Unsupported
from lanner.records import Flow, NewJob, RateLimit

if TYPE_CHECKING:
    from lanner.engine import Engine
    from lanner.task import Task

KeySpec: TypeAlias = str | Callable[..., object] | None
"""A key: a str, or a callable of the task's arguments whose value names it."""

_PERIODS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE: Final = re.compile(r"\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*(s|m|h|d)\s*")


def parse_rate(text: object, what: str = "rate_limit") -> tuple[int, float]:
    """`"100/m"` -> (100, 60.0): runs per period; the period is s, m, h or d, maybe with a
    count (`"5/10s"`: 5 per 10 seconds)."""
    found = _RATE.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ConfigError(f'{what} must look like "100/m" (runs per s, m, h or d), not {text!r}')
    limit = int(found.group(1))
    period = float(found.group(2) or 1) * _PERIODS[found.group(3)]
    if not 1 <= limit <= limits.MAX_RATE_LIMIT or not 0 < period <= limits.MAX_RATE_PERIOD_SEC:
        raise ConfigError(
            f"{what} {text!r} is out of bounds: 1 to {limits.MAX_RATE_LIMIT} runs per period "
            f"of at most {limits.MAX_RATE_PERIOD_SEC:g} s"
        )
    return limit, period


@dataclass(frozen=True, slots=True)
class Debounce:
    """One waiting job per key for a window: a run published waits `window` seconds (a
    timedelta, or seconds) before it may start; meanwhile a publish of the same key (a str,
    or a callable of the run's arguments; None: the task) replaces it, and its wait starts
    again (`keep="latest"`), or is dropped (`keep="first"`: the waiting run's handle is
    returned). A run of the key that has started does not count: a publish then makes a
    new waiting run. Runs of one key never overlap."""

    window: timedelta | float
    key: KeySpec = None
    keep: Literal["latest", "first"] = "latest"

    def __post_init__(self) -> None:
        seconds = self.seconds
        if not 0 < seconds <= limits.MAX_DELAY_SEC:
            raise ConfigError(f"a debounce window is over 0 s and at most ten years, not {seconds}")
        if self.keep not in ("latest", "first"):
            raise ConfigError(f'debounce keep= is "latest" or "first", not {self.keep!r}')

    @property
    def seconds(self) -> float:
        window = self.window
        return window.total_seconds() if isinstance(window, timedelta) else float(window)


def debounced(
    job: NewJob, task: type[Task], debounce: Debounce | None, args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> NewJob:  # fmt: skip
    """`job` made its key's debounced run: its jid names the task and key, it waits the
    window, and the key's runs never overlap (a concurrency key of its own, cap 1)."""
    if debounce is None:
        return job
    key = _key(debounce.key, task, args, kwargs, "debounce key") or ""
    jid = label(f"debounce-{task.name}-{key}", "debounce jid")
    flow = job.flow or Flow()
    if flow.concurrency_key is None:
        flow = flow._replace(concurrency_key=jid, max_concurrency=1)
    return job._replace(
        jid=jid,
        delay=max(job.delay, debounce.seconds),
        if_exists="move-unless-running" if debounce.keep == "latest" else "keep-waiting",
        flow=flow,
    )


def as_debounce(value: Debounce | timedelta | float | None) -> Debounce | None:
    """A Debounce as given, or made of a bare window (the task is the key)."""
    if value is None or isinstance(value, Debounce):
        return value
    return Debounce(value)


def other_turn(jid: str) -> str:
    """The second jid of a debounce key, used while a run of the first one is running."""
    return jid[:-2] if jid.endswith("~2") else f"{jid}~2"


@dataclass(frozen=True, slots=True)
class FlowOptions:
    """What `@app.task(...)`, `.options(...)` or a Task class set (None: not set)."""

    rate_limit: str | None = None
    rate_key: KeySpec = None
    concurrency_key: KeySpec = None
    max_concurrency: int | None = None
    fair_key: KeySpec = None

    def check(self) -> FlowOptions:
        """Self, checked when declared (keys are checked at publish, once made)."""
        if self.rate_limit is not None:
            parse_rate(self.rate_limit)
        cap = self.max_concurrency
        if cap is not None and (
            isinstance(cap, bool)
            or not isinstance(cap, int)
            or not 1 <= cap <= limits.MAX_CONCURRENCY_PER_KEY
        ):
            raise ConfigError(
                f"max_concurrency must be an int from 1 to {limits.MAX_CONCURRENCY_PER_KEY}, "
                f"not {cap!r}"
            )
        if self.concurrency_key is not None and cap is None:
            raise ConfigError("concurrency_key needs max_concurrency")
        if self.rate_key is not None and self.rate_limit is None:
            raise ConfigError("rate_key needs rate_limit")
        return self


def task_flow(task: type[Task], given: FlowOptions | None) -> FlowOptions:
    """The task's class attributes, overridden by what a publish gave."""
    declared = FlowOptions(
        getattr(task, "rate_limit", None),
        getattr(task, "rate_key", None),
        getattr(task, "concurrency_key", None),
        getattr(task, "max_concurrency", None),
        getattr(task, "fair_key", None),
    )
    if given is None:
        return declared
    return FlowOptions(
        given.rate_limit if given.rate_limit is not None else declared.rate_limit,
        given.rate_key if given.rate_key is not None else declared.rate_key,
        given.concurrency_key if given.concurrency_key is not None else declared.concurrency_key,
        given.max_concurrency if given.max_concurrency is not None else declared.max_concurrency,
        given.fair_key if given.fair_key is not None else declared.fair_key,
    )


def flow_of(
    task: type[Task],
    given: FlowOptions | None,
    queue: str,
    queue_rate: str | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Flow | None:
    """The Flow of one run of `task` in `queue` with these arguments, or None."""
    if (
        given is None
        and queue_rate is None
        and task.rate_limit is None
        and not task.max_concurrency
        and task.fair_key is None
    ):
        return None  # the common case, on every publish: nothing to look at
    options = task_flow(task, given)
    rates: list[RateLimit] = []
    if options.rate_limit is not None:
        limit, period = parse_rate(options.rate_limit)
        key = _key(options.rate_key, task, args, kwargs, "rate_key")
        rates.append(RateLimit(key or task.name, limit, period))
    if queue_rate is not None:
        limit, period = parse_rate(queue_rate, f"queue {queue}'s rate_limit")
        rates.append(RateLimit(f"queue:{queue}", limit, period))
    concurrency_key = None
    cap = options.max_concurrency or 0
    if cap:
        concurrency_key = _key(options.concurrency_key, task, args, kwargs, "concurrency_key")
        concurrency_key = concurrency_key or task.name
    fair_key = _key(options.fair_key, task, args, kwargs, "fair_key")
    if not rates and not cap and fair_key is None:
        return None
    return Flow(concurrency_key, cap, tuple(rates), fair_key)


def _key(
    spec: KeySpec, task: type[Task], args: Sequence[Any], kwargs: Mapping[str, Any], what: str
) -> str | None:
    """The key's value. A callable gets the run's arguments by name, as the task's function
    names them (`lambda user_id, **_: user_id` whether user_id was passed by position or
    not), else as they were passed."""
    if spec is None:
        return None
    if not callable(spec):
        return label(str(spec), what)
    try:
        bound = inspect.signature(task.run_task).bind(None, *args, **kwargs)
    except (TypeError, ValueError):
        return label(str(spec(*args, **kwargs)), what)
    named = dict(list(bound.arguments.items())[1:])
    for name, parameter in inspect.signature(task.run_task).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and name in named:
            named.update(named.pop(name))
        elif parameter.kind is inspect.Parameter.VAR_POSITIONAL and name in named:
            return label(str(spec(*args, **kwargs)), what)
    return label(str(spec(**named)), what)


def refuse_unheld(
    engine: Engine, task: str, queue: str, flow: Flow | None, debounce: Debounce | None
) -> None:
    """Raise `Unsupported` in one line, naming the option, the task and the engine, if the
    engine cannot hold this publish's flow (`flow` as the task and queue made it, before a
    debounce adds to it): never a control silently dropped."""
    refused = unheld(engine.capabilities, task, queue, flow, debounce)
    if refused is not None:
        option, capability, why = refused
        raise Unsupported(
            engine.name, option, capability.value, f"{why} (capability {capability.value!r})"
        )


def unheld(
    have: frozenset[Capability],
    task: str,
    queue: str,
    flow: Flow | None,
    debounce: Debounce | None,
) -> tuple[str, Capability, str] | None:
    """The first option the engine cannot hold: (its name, the capability, why)."""
    if flow is not None and flow.rates and Capability.FLOW not in have:
        rate = flow.rates[0]
        held = f"a limit of {rate.limit} runs per {rate.period:g} s"
        if rate.bucket == f"queue:{queue}" and len(flow.rates) == 1:
            whose = f"{held} for queue {queue!r}"
        else:
            whose = f"{held} for task {task} (bucket {rate.bucket!r})"
        return "rate_limit", Capability.FLOW, f"{whose} needs the runs started counted in the store"
    if flow is not None and flow.max_concurrency and Capability.FLOW not in have:
        why = (
            f"task {task}'s cap of {flow.max_concurrency} running per key "
            f"{flow.concurrency_key!r} needs the running jobs counted per key in the store"
        )
        return "max_concurrency", Capability.FLOW, why
    for needed in (Capability.UNIQUE, Capability.FLOW):
        if debounce is not None and needed not in have:
            why = (
                f"task {task}'s one waiting run per key for {debounce.seconds:g} s needs the "
                "store to replace or keep a waiting job by its id"
            )
            return "debounce", needed, why
    if flow is not None and flow.fair_key is not None and Capability.FAIRNESS not in have:
        why = f"task {task}'s turns between the fair keys of queue {queue!r} are not kept"
        return "fair_key", Capability.FAIRNESS, why
    return None

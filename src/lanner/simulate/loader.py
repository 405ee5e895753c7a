"""Reading a scenario from YAML (`lanner simulate SCENARIO.yaml`); docs/simulate.md has the format.

Every mistake is a `ConfigError` naming the file, the queue and the field, so a typo never
passes silently and never ends in a traceback.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from lanner.errors import ConfigError
from lanner.queues import QUEUE_FIELDS, QueueConfig
from lanner.selectors import DEFAULT_SELECTOR
from lanner.simulate.arrivals import ArrivalSpec, Burst
from lanner.simulate.distributions import Empirical, Exponential, Fixed, LogNormal, RunTime
from lanner.simulate.scenario import DEFAULT_DRAIN_LIMIT, Costs, Scenario, SimQueue, Window
from lanner.worker.loop import READY_CACHE_SEC

__all__ = ["load_scenario", "parse_duration", "parse_scenario"]

TOP_FIELDS: Final = (
    "name", "seed", "workers", "duration", "selector", "measure", "static", "costs",
    "drain_limit", "ready_cache_sec", "queues",
)  # fmt: skip
SIM_FIELDS: Final = ("arrivals", "run_time")
ARRIVAL_FIELDS: Final = ("rate", "bursts", "replay")
DISTRIBUTIONS: Final = ("fixed", "exponential", "lognormal", "empirical")

_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|min|s|m|h|d)")
_RATE_UNITS: Final = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class _Where:
    """Builds errors that say where: the file, and the queue when there is one."""

    def __init__(self, source: str | None, queue: str | None = None) -> None:
        self.source, self.queue = source, queue

    def error(self, problem: str, field: str | None = None) -> ConfigError:
        where = f"{field}: " if field else ""
        return ConfigError(where + problem, source=self.source, queue=self.queue, field=field)

    def check_keys(self, mapping: Mapping[Any, Any], allowed: tuple[str, ...], what: str) -> None:
        for key in mapping:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.error(
                    f"unknown {what} field {key!r}{hint}; the fields are {', '.join(allowed)}"
                )


def parse_duration(value: object, where: _Where | None = None, field: str = "duration") -> float:
    """Seconds from a number or a string such as "90s", "15m", "2h", "1d", "1h30m", "250ms"."""
    where = where or _Where(None)
    if isinstance(value, bool):
        raise where.error(f"expected a duration such as 90, '15m' or '2h', not {value!r}", field)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().lower()
        parts = list(_DURATION.finditer(text))
        if not parts or "".join(p.group(0) for p in parts) != text.replace(" ", ""):
            raise where.error(
                f"{value!r} is not a duration such as '90s', '15m', '2h' or '1d'", field
            )
        seconds = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
    else:
        raise where.error(f"expected a duration such as 90, '15m' or '2h', not {value!r}", field)
    if not math.isfinite(seconds) or seconds < 0:
        raise where.error(f"must be a finite duration >= 0, not {value!r}", field)
    return seconds


def _rate(value: object, where: _Where, field: str) -> float:
    """Tasks per second from a number or "120/min", "5000/h", "3/s"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str) and "/" in value:
        count, _, unit = value.partition("/")
        factor = _RATE_UNITS.get(unit.strip().lower())
        try:
            rate = float(count) / factor if factor else math.nan
        except ValueError:
            rate = math.nan
        if math.isnan(rate):
            raise where.error(f"{value!r} is not a rate such as 12, '300/min' or '5000/h'", field)
    else:
        raise where.error(
            f"expected a rate such as 12 (per second) or '300/min', not {value!r}", field
        )
    if not math.isfinite(rate) or rate < 0:
        raise where.error(f"must be a finite rate >= 0, not {value!r}", field)
    return rate


def _number(value: object, where: _Where, field: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise where.error(f"must be a finite number, not {value!r}", field)
    if value < 0 or (positive and value == 0):
        raise where.error(f"must be {'> 0' if positive else '>= 0'}, not {value!r}", field)
    return float(value)


def _integer(value: object, where: _Where, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise where.error(f"must be an int >= {minimum}, not {value!r}", field)
    return value


def _mapping(value: object, where: _Where, field: str) -> Mapping[Any, Any]:
    if not isinstance(value, dict):
        raise where.error(f"must be a mapping, not {type(value).__name__}", field)
    return value


# -- arrivals and run times -----------------------------------------------------------------
def _arrivals(value: object, where: _Where, base: Path) -> ArrivalSpec:
    spec = _mapping(value, where, "arrivals")
    where.check_keys(spec, ARRIVAL_FIELDS, "arrivals")
    if not spec:
        raise where.error("needs at least one of rate, bursts, replay", "arrivals")
    changes: tuple[float, ...] = (0.0,)
    rates: tuple[float, ...] = (0.0,)
    if "rate" in spec:
        changes, rates = _rates(spec["rate"], where)
    bursts = tuple(_burst(item, n, where) for n, item in enumerate(_list(spec, "bursts", where), 1))
    replay = _replay(spec["replay"], where, base) if "replay" in spec else ()
    return ArrivalSpec(changes, rates, bursts, replay)


def _rates(value: object, where: _Where) -> tuple[tuple[float, ...], tuple[float, ...]]:
    field = "arrivals.rate"
    if not isinstance(value, dict):
        return (0.0,), (_rate(value, where, field),)
    if not value:
        raise where.error("needs at least one time: rate pair", field)
    points = sorted(
        (parse_duration(at, where, field), _rate(rate, where, f"{field}[{at}]"))
        for at, rate in value.items()
    )
    if points[0][0] > 0:
        points.insert(0, (0.0, 0.0))  # nothing arrives before the first time given
    return tuple(at for at, _ in points), tuple(rate for _, rate in points)


def _list(spec: Mapping[Any, Any], key: str, where: _Where) -> list[Any]:
    value = spec.get(key, [])
    if not isinstance(value, list):
        raise where.error(f"must be a list, not {type(value).__name__}", f"arrivals.{key}")
    return value


def _burst(item: object, number: int, where: _Where) -> Burst:
    field = f"arrivals.bursts[{number}]"
    spec = _mapping(item, where, field)
    if "at" not in spec or "count" not in spec:
        raise where.error("needs 'at' and 'count' (and optionally 'over')", field)
    where.check_keys(spec, ("at", "count", "over"), "burst")
    return Burst(
        at=parse_duration(spec["at"], where, f"{field}.at"),
        count=_integer(spec["count"], where, f"{field}.count", 0),
        over=parse_duration(spec.get("over", 0), where, f"{field}.over"),
    )


def _replay(value: object, where: _Where, base: Path) -> tuple[float, ...]:
    field = "arrivals.replay"
    spec = {"file": value} if isinstance(value, str) else _mapping(value, where, field)
    where.check_keys(spec, ("file", "origin"), "replay")
    if not isinstance(spec.get("file"), str):
        raise where.error("needs 'file': a CSV file whose first column is a time in seconds", field)
    path = base / spec["file"]
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise where.error(f"cannot read {str(path)!r}: {error.strerror or error}", field) from None
    times: list[float] = []
    for number, line in enumerate(lines, 1):
        cell = line.split(",", 1)[0].strip()
        if not cell:
            continue
        try:
            times.append(float(cell))
        except ValueError:
            if times or number > 1:  # only a first line may be a header
                raise where.error(
                    f"{path.name} line {number}: {cell!r} is not a time", field
                ) from None
    origin = spec.get("origin", 0)
    if origin == "first":
        shift = min(times, default=0.0)
    else:
        shift = _number(origin, where, f"{field}.origin")
    return tuple(sorted(time - shift for time in times))


def _run_time(value: object, where: _Where) -> RunTime:
    field = "run_time"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Fixed(_number(value, where, field, positive=True))
    spec = _mapping(value, where, field)
    kind = spec.get("distribution")
    if kind not in DISTRIBUTIONS:
        raise where.error(
            f"distribution must be one of {', '.join(DISTRIBUTIONS)}, not {kind!r}", field
        )
    builders: dict[str, tuple[tuple[str, ...], Callable[[], RunTime]]] = {
        "fixed": (("seconds",), lambda: Fixed(_positive(spec, "seconds", where))),
        "exponential": (("mean",), lambda: Exponential(_positive(spec, "mean", where))),
        "lognormal": (
            ("mean", "sigma"),
            lambda: LogNormal(_positive(spec, "mean", where), _positive(spec, "sigma", where)),
        ),
        "empirical": (("edges", "counts"), lambda: _empirical(spec, where)),
    }
    needed, build = builders[kind]
    where.check_keys(spec, ("distribution", *needed), f"{kind} run_time")
    for name in needed:
        if name not in spec:
            raise where.error(f"a {kind} run time needs {', '.join(needed)}", field)
    return build()


def _positive(spec: Mapping[Any, Any], key: str, where: _Where) -> float:
    return _number(spec[key], where, f"run_time.{key}", positive=True)


def _empirical(spec: Mapping[Any, Any], where: _Where) -> Empirical:
    edges, counts = spec["edges"], spec["counts"]
    if not isinstance(edges, list) or not isinstance(counts, list) or len(edges) != len(counts) + 1:
        raise where.error("edges must be a list one longer than counts", "run_time")
    bounds = [_number(e, where, "run_time.edges") for e in edges]
    weights = [_number(c, where, "run_time.counts") for c in counts]
    if any(b >= a for a, b in zip(bounds[1:], bounds, strict=False)) or sum(weights) <= 0:
        raise where.error("edges must increase and counts must not all be 0", "run_time")
    return Empirical(tuple(bounds), tuple(weights))


# -- the scenario ---------------------------------------------------------------------------
def _queue(entry: object, number: int, source: str | None, base: Path) -> SimQueue:
    where = _Where(source)
    if not isinstance(entry, dict):
        raise where.error(f"queue #{number} must be a mapping, not {type(entry).__name__}")
    name = entry.get("name")
    where = _Where(source, name if isinstance(name, str) else f"#{number}")
    where.check_keys(entry, (*QUEUE_FIELDS, *SIM_FIELDS), "queue")
    for required in ("name", "priority", "arrivals", "run_time"):
        if required not in entry:
            raise where.error(f"missing required field {required!r}")
    fields = {key: value for key, value in entry.items() if key not in SIM_FIELDS}
    try:
        config = QueueConfig(**fields)
    except ConfigError as problem:
        raise where.error(problem.problem) from None
    return SimQueue(
        config, _arrivals(entry["arrivals"], where, base), _run_time(entry["run_time"], where)
    )


def parse_scenario(
    document: object, source: str | None = None, base: Path | None = None
) -> Scenario:
    """A scenario from parsed YAML; `base` is where relative replay files are found."""
    where = _Where(source)
    top = _mapping(document, where, "")
    where.check_keys(top, TOP_FIELDS, "scenario")
    entries = top.get("queues")
    if not isinstance(entries, list) or not entries:
        raise where.error("a scenario needs 'queues': a non-empty list of queues")
    queues = [_queue(entry, n, source, base or Path()) for n, entry in enumerate(entries, 1)]
    names = [q.name for q in queues]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError("defined twice", source=source, queue=name, field="name")
    if "workers" not in top:
        raise where.error("missing required field 'workers'")
    workers = _integer(top["workers"], where, "workers", 1)
    duration = _scenario_duration(top, queues, where)
    window = _window(top.get("measure"), duration, where)
    selector = top.get("selector", DEFAULT_SELECTOR)
    if not isinstance(selector, str):
        raise where.error(f"must be a selector's name, not {selector!r}", "selector")
    return Scenario(
        name=str(top.get("name") or (Path(source).stem if source else "scenario")),
        queues=tuple(sorted(queues, key=lambda q: -q.config.priority)),
        workers=workers,
        duration=duration,
        seed=_integer(top.get("seed", 0), where, "seed", 0),
        selector=selector,
        window=window,
        static=_static(top.get("static", "proportional"), names, where),
        costs=_costs(top.get("costs", {}), where),
        drain_limit=parse_duration(
            top.get("drain_limit", DEFAULT_DRAIN_LIMIT), where, "drain_limit"
        ),
        ready_cache_sec=_number(
            top.get("ready_cache_sec", READY_CACHE_SEC), where, "ready_cache_sec"
        ),
        source=source,
    )


def _scenario_duration(top: Mapping[str, Any], queues: list[SimQueue], where: _Where) -> float:
    if "duration" in top:
        duration = parse_duration(top["duration"], where)
    else:  # a replay alone says how long it lasts
        duration = max((t for q in queues for t in q.arrivals.replay), default=0.0) + 1e-6
        if not any(q.arrivals.replay for q in queues):
            raise where.error("missing required field 'duration' (such as '1h' or '24h')")
    if duration <= 0:
        raise where.error("must be more than 0", "duration")
    return duration


def _window(value: object, duration: float, where: _Where) -> Window | None:
    if value is None:
        return None
    spec = _mapping(value, where, "measure")
    where.check_keys(spec, ("start", "end"), "measure")
    start = parse_duration(spec.get("start", 0), where, "measure.start")
    end = parse_duration(spec.get("end", duration), where, "measure.end")
    if not start < end <= duration:
        raise where.error(f"needs start < end <= duration ({duration:g} s)", "measure")
    return Window(start, end)


def _static(value: object, names: list[str], where: _Where) -> dict[str, float] | None:
    if value == "proportional":
        return None
    if not isinstance(value, dict):
        raise where.error("must be 'proportional' or a mapping of queue name to share", "static")
    unknown = sorted(set(map(str, value)) - set(names))
    if unknown:
        raise where.error(
            f"names queues the scenario does not have: {', '.join(unknown)}", "static"
        )
    shares = {name: _number(value.get(name, 0), where, f"static.{name}") for name in names}
    if sum(shares.values()) <= 0:
        raise where.error("the shares must not all be 0", "static")
    return shares


def _costs(value: object, where: _Where) -> Costs:
    spec = _mapping(value, where, "costs")
    where.check_keys(spec, ("pop_sec", "task_sec", "wake_sec"), "costs")
    defaults = Costs()
    return Costs(
        pop_sec=_number(
            spec.get("pop_sec", defaults.pop_sec), where, "costs.pop_sec", positive=True
        ),
        task_sec=_number(spec.get("task_sec", defaults.task_sec), where, "costs.task_sec"),
        wake_sec=_number(spec.get("wake_sec", defaults.wake_sec), where, "costs.wake_sec"),
    )


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read a scenario file; relative replay files are found next to it."""
    source = os.fspath(path)
    try:
        text = Path(source).read_text()
    except OSError as error:
        raise ConfigError(
            f"cannot read the file: {error.strerror or error}", source=source
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"not valid YAML: {_yaml_problem(error)}", source=source) from None
    return parse_scenario(document, source, Path(source).parent)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """The parser's complaint on one line, with where it is."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    return " ".join(str(error).split())

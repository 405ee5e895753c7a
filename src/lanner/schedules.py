"""Schedules: `@app.periodic(cron=..., every=...)`, fired by the store, not by a beat process.

Each tick of a schedule is one job whose jid names the schedule and the tick
(`periodic-<name>@<unix time>`), put ahead of time as a delayed job with `if_exists="once"`:
a store keeps one job per jid, complete ones included, so any number of pools putting the
same tick make one run of it. A pool registers its app's schedules when it starts
(`register`: the schedule is written to the store's config as `lanner-schedule:<name>`,
its missed ticks are caught up, its next ticks put) and puts the next ticks every
`TICK_HORIZON_SEC` / 2 (`put_upcoming`). A schedule that is no longer in the code is
removed by the next pool that starts (its config entry unset, its pending tick cancelled),
or by `lanner schedules --prune`.

Cron expressions are evaluated by cronsim (the `cron` extra), in the schedule's time zone
(zoneinfo); a time that a DST change skips or repeats is handled as cronsim does (as
Debian's cron: a skipped time runs at the change, a repeated one once). `every=` ticks
fall on whole multiples of the interval since the Unix epoch, so every pool agrees on them.

Catch-up (`catch_up=`), for ticks missed while no pool ran: "once" (the default: the
latest missed tick runs once, now), "all" (each missed tick, at most `MAX_CATCH_UP`), or
"skip". Only ticks after the schedule was first registered count as missed; a tick's job
is how the store knows it ran, so a tick older than the store's retention of completed
jobs (jobs-history, 7 days by default) is not looked at.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lanner import limits
from lanner.engine import Capability, Engine
from lanner.errors import ConfigError, Unsupported
from lanner.records import NewJob

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.task import Task

logger = logging.getLogger("lanner.schedules")

CatchUp = Literal["once", "all", "skip"]
CATCH_UPS: Final = ("once", "all", "skip")

CONFIG_PREFIX: Final = "lanner-schedule:"
"""A schedule's entry in the store's config: `lanner-schedule:<name>` -> JSON."""

TICK_HORIZON_SEC: Final = 60.0
"""Ticks due within this much are put ahead (and always the next one); pools put the next
ones twice as often."""

MAX_CATCH_UP: Final = 100
"""Missed ticks `catch_up` looks back at (and `catch_up="all"` runs) at most."""

CATCH_UP_SLACK_SEC: Final = 60.0
"""A tick due this recently is not missed but on time (a pool starting just after it)."""

NEEDS: Final = (Capability.DELAY, Capability.UNIQUE, Capability.LOOKUP, Capability.CONFIG)


@dataclass(frozen=True)
class Schedule:
    """One declared schedule of a task: when its runs fire, and with what arguments."""

    name: str
    task: type[Task]
    cron: str | None = None
    every: float | None = None  # seconds
    tz: str = "UTC"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    catch_up: CatchUp = "once"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ConfigError(f"schedule {self.name}: give cron= or every=, one of them")
        if self.catch_up not in CATCH_UPS:
            raise ConfigError(
                f"schedule {self.name}: catch_up must be one of {', '.join(CATCH_UPS)}, "
                f"not {self.catch_up!r}"
            )
        if self.every is not None and not 1 <= self.every <= limits.MAX_DELAY_SEC:
            raise ConfigError(f"schedule {self.name}: every= must be 1 s to 10 years")
        try:
            ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"schedule {self.name}: unknown time zone {self.tz!r}") from None
        if self.cron is not None:
            self.next_after(0.0)  # a malformed expression fails here, when declared

    # -- ticks ----------------------------------------------------------------------------
    def next_after(self, moment: float) -> float:
        """The first tick strictly after `moment` (a Unix time)."""
        if self.every is not None:
            return (math.floor(moment / self.every) + 1) * self.every
        return self._cron_tick(moment, reverse=False)

    def last_at_or_before(self, moment: float) -> float:
        """The latest tick at or before `moment`."""
        if self.every is not None:
            return math.floor(moment / self.every) * self.every
        return self._cron_tick(moment, reverse=True)

    def _cron_tick(self, moment: float, *, reverse: bool) -> float:
        try:
            from cronsim import CronSim, CronSimError
        except ImportError:
            raise ConfigError("cron schedules need cronsim: pip install 'lanner[cron]'") from None
        # CronSim gives the times strictly after `start` (or strictly before it, reversed),
        # to the minute: reversed, a second later includes a tick at `moment` itself.
        start = datetime.fromtimestamp(moment, ZoneInfo(self.tz))
        if reverse:
            start = (start + timedelta(seconds=1)).replace(microsecond=0)
        try:
            found = next(CronSim(str(self.cron), start, reverse=reverse))
        except CronSimError as error:
            raise ConfigError(f"schedule {self.name}: bad cron {self.cron!r}: {error}") from None
        return found.timestamp()

    def jid(self, tick: float) -> str:
        return f"periodic-{self.name}@{tick:.0f}"

    def spec(self) -> str:
        """What the store's config keeps of it (for `lanner schedules` and the dashboard)."""
        return json.dumps(
            {
                "task": self.task.name,
                "cron": self.cron,
                "every": self.every,
                "tz": self.tz,
                "catch_up": self.catch_up,
            },
            separators=(",", ":"),
        )


def periodic_decorator(
    app: App,
    cron: str | None,
    every: timedelta | float | None,
    tz: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    catch_up: CatchUp,
    name: str | None,
) -> Callable[[Any], Any]:
    """`@app.periodic(...)`: record a schedule of the task below it (a `@app.task`
    function or a Task class), which is returned as it was."""
    seconds = every.total_seconds() if isinstance(every, timedelta) else every

    def decorate(target: Any) -> Any:
        task = getattr(target, "task_class", target)
        from lanner.task import Task

        if not (isinstance(task, type) and issubclass(task, Task)):
            raise ConfigError("@app.periodic goes above @app.task, or on a Task class")
        schedule = Schedule(
            name or task.name, task, cron, seconds, tz, tuple(args), dict(kwargs or {}), catch_up
        )
        app.schedules[schedule.name] = schedule
        return target

    return decorate


# -- the store's side ---------------------------------------------------------------------
def supported(engine: Engine) -> bool:
    return all(capability in engine.capabilities for capability in NEEDS)


def register(app: App, engine: Engine, now: float) -> None:
    """At a pool's start: write the schedules to the store, catch up missed ticks, put the
    next ones, and remove the schedules the code no longer has."""
    if not supported(engine):
        if app.schedules:
            missing = next(c for c in NEEDS if c not in engine.capabilities)
            raise Unsupported(engine.name, "schedules (@app.periodic)", missing.value)
        return
    known = stored(engine)
    for schedule_name in sorted(set(known) - set(app.schedules)):
        remove(engine, schedule_name, known[schedule_name], now)
    jobs: list[NewJob] = []
    for schedule in app.schedules.values():
        first = known.get(schedule.name, {}).get("registered")
        if first is None or known[schedule.name].get("spec") != schedule.spec():
            registered = now if first is None else float(first)
            entry = {"spec": schedule.spec(), "registered": registered}
            engine.config_set(CONFIG_PREFIX + schedule.name, json.dumps(entry), now=now)
            first = registered
        jobs += _missed(app, engine, schedule, float(first), now)
    jobs += _upcoming(app, app.schedules.values(), now)
    if jobs:
        engine.put_many(jobs, now=now)


def put_upcoming(app: App, engine: Engine, now: float) -> None:
    """Put the ticks due within the horizon, and the next one after it."""
    if not supported(engine):
        return  # `register` said so at the start
    jobs = _upcoming(app, app.schedules.values(), now)
    if jobs:
        engine.put_many(jobs, now=now)


def stored(engine: Engine) -> dict[str, dict[str, Any]]:
    """The schedules the store knows: name -> {"spec": JSON text, "registered": time}."""
    found = {}
    for key, value in engine.config_all().items():
        if key.startswith(CONFIG_PREFIX):
            try:
                found[key[len(CONFIG_PREFIX) :]] = json.loads(str(value))
            except ValueError:
                continue
    return found


def remove(engine: Engine, name: str, entry: Mapping[str, Any], now: float) -> None:
    """Forget a schedule: its config entry, and its tick that waits (if it can be named)."""
    logger.info("schedule %s is no longer declared: removed", name)
    engine.config_unset(CONFIG_PREFIX + name, now=now)
    try:
        spec = json.loads(entry["spec"])
        from lanner.task import Task

        ghost = Schedule(name, Task, spec["cron"], spec["every"], spec["tz"])
    except (KeyError, ValueError, TypeError, ConfigError):
        return
    tick = ghost.next_after(now)
    pending = [ghost.jid(tick), ghost.jid(ghost.next_after(tick))]
    for job in engine.multiget(pending):
        if job.state in ("scheduled", "waiting"):
            engine.cancel([job.jid])


def _missed(app: App, engine: Engine, schedule: Schedule, first: float, now: float) -> list[NewJob]:
    """Catch-up: the jobs of missed ticks to put now. A tick put ahead that is still
    pending (overdue: no pool ran at its time) counts as a missed tick that runs; "once"
    keeps only the latest of those, "skip" none of them (they are cancelled)."""
    ticks: list[float] = []  # newest first
    tick = schedule.last_at_or_before(now)
    while tick > first and len(ticks) < MAX_CATCH_UP:
        ticks.append(tick)
        tick = schedule.last_at_or_before(tick - 1e-3)
    if not ticks:
        return []
    found = {job.jid: job.state for job in engine.multiget([schedule.jid(t) for t in ticks])}
    pending = [t for t in ticks if found.get(schedule.jid(t)) in ("scheduled", "waiting")]
    if schedule.catch_up == "all":
        return [_tick_job(app, schedule, t, now) for t in reversed(ticks)
                if schedule.jid(t) not in found]  # fmt: skip
    keep = 1 if schedule.catch_up == "once" else 0
    # An overdue tick goes; one just due (within CATCH_UP_SLACK_SEC) is on time.
    overdue = [t for t in pending if t < now - CATCH_UP_SLACK_SEC]
    late = overdue[keep:] if len(overdue) == len(pending) else overdue
    if late:
        engine.cancel([schedule.jid(t) for t in late])
    latest = ticks[0]
    if keep and not pending and schedule.jid(latest) not in found:
        return [_tick_job(app, schedule, latest, now)]
    return []


def _upcoming(app: App, schedules: Any, now: float) -> list[NewJob]:
    jobs = []
    for schedule in schedules:
        tick = schedule.next_after(now)
        while True:
            jobs.append(_tick_job(app, schedule, tick, now))
            if tick > now + TICK_HORIZON_SEC:
                break
            tick = schedule.next_after(tick)
    return jobs


def _tick_job(app: App, schedule: Schedule, tick: float, now: float) -> NewJob:
    """The job of one tick: the task's run with the schedule's arguments, due at `tick`."""
    from lanner.prepared import Message, PublishOptions

    # unique: the publish asks nothing of the engine (the supervisor has none open).
    options = PublishOptions(jid=schedule.jid(tick), delay=max(0.0, tick - now), unique=True)
    job = app._new_job(Message(schedule.task, schedule.args, schedule.kwargs, None, options))
    return job._replace(if_exists="once")


def next_runs(app: App, now: float) -> list[tuple[Schedule, float]]:
    """Each declared schedule with its next tick, soonest first."""
    return sorted(((s, s.next_after(now)) for s in app.schedules.values()), key=lambda p: p[1])


def spec_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The schedule a stored entry describes (task, cron, every, tz, catch_up)."""
    try:
        spec = json.loads(entry.get("spec", "{}"))
    except (TypeError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}


def next_of(name: str, entry: Mapping[str, Any], now: float) -> float | None:
    """The next tick of a stored schedule, or None if it cannot be told (no cronsim)."""
    spec = spec_of(entry)
    try:
        from lanner.task import Task

        ghost = Schedule(name, Task, spec.get("cron"), spec.get("every"), spec.get("tz", "UTC"))
        return ghost.next_after(now)
    except (ConfigError, TypeError):
        return None


def describe(entry: Mapping[str, Any]) -> str:
    """`cron "*/5 * * * *" Europe/Paris` or `every 300 s`, from a stored entry."""
    spec = spec_of(entry)
    if spec.get("cron"):
        return f'cron "{spec["cron"]}" {spec.get("tz", "UTC")}'
    return f"every {spec.get('every', 0):g} s"


def utc(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

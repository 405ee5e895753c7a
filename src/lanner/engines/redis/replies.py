"""What the Redis engine's Lua core replies, as lanner's values and errors.

The core replies in qless's JSON (cjson: an empty array comes back as `{}`), and its error
replies have a stable wording (the header of `lua/layout.lua`), which `translate` maps to
lanner's errors. Where qless's replies differ from lanner's contract, the difference is
bridged here (see docs/engines/redis.md).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from lanner import fastjson
from lanner.engine import CONFIG_DEFAULTS
from lanner.errors import (
    EngineUnavailable,
    InvalidState,
    JobNotFound,
    LannerError,
    LockLost,
    MalformedArgument,
    PayloadTooLarge,
    QueueFull,
)
from lanner.job import Failure, Job, JobState
from lanner.records import (
    ConfigValue,
    JobOutcome,
    QueueCounts,
    QueueStats,
    QueueUsage,
    RecurringJob,
    TimingStats,
    WorkerCounts,
    WorkerJobs,
)

_STATES: Final = {state.value: state for state in JobState}
# `json.dumps(..., separators=(",", ":"))`'s text, without building an encoder per job.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))


_JOB_MISSING: Final = re.compile(r"(?:Recurring job|Job) (.+) does not exist")
_NOT_RUNNING: Final = re.compile(r"Job (.+) not currently running: (.*)")
_NOT_DEPENDS: Final = re.compile(r"Job (.+) not in the depends state: (.*)")
_LOCK_ELSEWHERE: Final = re.compile(
    r"Job (.+) (?:given out to another worker|running in another queue): .*"
)
_DEPENDED_ON: Final = re.compile(r"Job (.+) is a dependency of (.+), which is not being canceled")
_RUNNING: Final = re.compile(r"Job (.+) is running: (.*)")


UNAVAILABLE: Final = (
    "READONLY", "OOM", "MISCONF", "LOADING", "BUSY", "MASTERDOWN", "NOREPLICAS",
)  # fmt: skip
"""Error replies of a server that cannot serve writes now (a replica after failover, out
of memory, failing to persist, loading, busy in a script, fewer replicas than its
min-replicas-to-write): the store is away for now."""


_INTERNAL: Final = re.compile(r"Internal error in [\w.]+: (.*)", re.DOTALL)
"""A Redis command that failed inside the core (which names the command it was running)."""


def translate(command: str, message: str) -> LannerError:
    """The lanner error for an error reply of the script (wording: the script's header)."""
    inner = found.group(1) if (found := _INTERNAL.fullmatch(message)) else message
    if inner.startswith(UNAVAILABLE):
        return EngineUnavailable(f"{command}(): Redis cannot serve it now: {message}")
    if message.startswith("Malformed"):
        return MalformedArgument(f"{command}(): {message}")
    if message.startswith("Queue full: "):
        return QueueFull(f"{command}(): {message}")
    if message.startswith("Payload too large: "):
        return PayloadTooLarge(f"{command}(): {message}")
    if found := _JOB_MISSING.fullmatch(message):
        return JobNotFound(found.group(1), command)
    if found := _NOT_RUNNING.fullmatch(message):
        if command == "timeout":
            return InvalidState(f"timeout(): job {found.group(1)} is not running: {found[2]}")
        return LockLost(f"{command}(): job {found.group(1)} is not currently running: {found[2]}")
    if _LOCK_ELSEWHERE.fullmatch(message):
        return LockLost(f"{command}(): {message}")
    if found := _NOT_DEPENDS.fullmatch(message):
        if found.group(2) == "missing":
            return JobNotFound(found.group(1), command)
        return InvalidState(f"{command}(): {message}")
    if _DEPENDED_ON.fullmatch(message) or _RUNNING.fullmatch(message):
        return InvalidState(f"{command}(): {message}")
    return LannerError(f"{command}(): the Redis engine's script failed: {message}")


def as_list(value: Any) -> list[Any]:
    """A JSON array from the script; cjson writes an empty one as {}."""
    return value if isinstance(value, list) else []


def _float_when(entry: dict[str, Any]) -> dict[str, Any]:
    when = entry.get("when")
    if isinstance(when, int):
        entry["when"] = float(when)
    return entry


def job(obj: Mapping[str, Any]) -> Job:
    """A Job from the script's JSON job object."""
    state = _STATES[obj["state"]]
    failure = obj.get("failure")
    history = [_float_when(entry) for entry in as_list(obj.get("history"))]
    spawned = obj.get("spawned_from_jid")
    return Job(
        jid=obj["jid"],
        klass=obj["klass"],
        queue=obj.get("queue") or "",
        data=obj.get("data") or "{}",
        priority=int(obj.get("priority") or 0),
        tags=tuple(as_list(obj.get("tags"))),
        state=state,
        retries=int(obj.get("retries") or 0),
        remaining=int(obj.get("remaining") or 0),
        worker=obj.get("worker") or "",
        expires=float(obj.get("expires") or 0),
        # qless keeps the last failure until the job completes; lanner's contract shows it
        # only while the job is failed.
        failure=(
            Failure(
                group=failure["group"],
                message=failure.get("message", ""),
                when=float(failure.get("when", 0)),
                worker=failure.get("worker", ""),
            )
            if state is JobState.FAILED and isinstance(failure, dict) and "group" in failure
            else None
        ),
        dependencies=tuple(sorted(as_list(obj.get("dependencies")))),
        dependents=tuple(sorted(as_list(obj.get("dependents")))),
        spawned_from_jid=spawned if isinstance(spawned, str) and spawned else None,
        tracked=bool(obj.get("tracked")),
        history_json=_COMPACT.encode(history),
        result=obj.get("result") or None,
        due=float(obj["due"]) if obj.get("due") else None,
    )


def jobs(reply: Any) -> list[Job]:
    return [job(obj) for obj in as_list(fastjson.loads(reply))]


def outcomes(reply: Any) -> list[JobOutcome]:
    """`lanner.outcomes`' rows as JobOutcomes (a failure shown only while failed, as
    `job` shows it)."""
    found = []
    for jid, state_name, result, failure_text in as_list(json.loads(reply)):
        state = _STATES[state_name]
        failure = json.loads(failure_text) if failure_text else None
        shown = (
            Failure(failure["group"], failure.get("message", ""),
                    float(failure.get("when", 0)), failure.get("worker", ""))
            if state is JobState.FAILED and isinstance(failure, dict) and "group" in failure
            else None
        )  # fmt: skip
        found.append(JobOutcome(jid, state, result or None, shown))
    return found


def setting(key: str, stored: Any) -> ConfigValue | None:
    """A setting as the config hash holds it (None: not set), or its default."""
    if stored is None:
        return CONFIG_DEFAULTS.get(key)
    return config_value(decoded(stored))


def settings(stored: Mapping[Any, Any]) -> dict[str, ConfigValue]:
    """Every setting: the defaults, then what the config hash holds (read directly: the
    core's own defaults name qless as the application)."""
    merged: dict[str, ConfigValue] = dict(CONFIG_DEFAULTS)
    merged.update((decoded(k), config_value(decoded(v))) for k, v in stored.items())
    return merged


def config_value(text: str) -> ConfigValue:
    """A stored setting, as the int or float it was set as when it reads as one."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def timing(obj: Mapping[str, Any]) -> TimingStats:
    return TimingStats(
        count=int(obj.get("count") or 0),
        mean=float(obj.get("mean") or 0),
        std=float(obj.get("std") or 0),
        histogram=tuple(int(n) for n in as_list(obj.get("histogram"))),
    )


def counts(obj: Mapping[str, Any]) -> QueueCounts:
    return QueueCounts(
        name=obj["name"],
        waiting=int(obj["waiting"]),
        stalled=int(obj["stalled"]),
        running=int(obj["running"]),
        scheduled=int(obj["scheduled"]),
        depends=int(obj["depends"]),
        recurring=int(obj["recurring"]),
        paused=bool(obj["paused"]),
    )


def usage(queue: str, reply: Any) -> QueueUsage:
    """`lanner.usage`'s reply: items, bytes, total, expired, discarded."""
    items, size, total, expired, discarded = (int(n) for n in reply)
    return QueueUsage(queue, items, size, total, expired, discarded)


def decoded(value: bytes | str) -> str:
    """A reply string (the clients decode replies; redis-py's types allow bytes)."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def stats(reply: str) -> QueueStats:
    obj = json.loads(reply)
    return QueueStats(
        retries=int(obj.get("retries") or 0),
        failed=int(obj.get("failed") or 0),
        failures=int(obj.get("failures") or 0),
        wait=timing(obj["wait"]),
        run=timing(obj["run"]),
    )


def workers(reply: str) -> list[WorkerCounts]:
    return [
        WorkerCounts(w["name"], int(w["jobs"]), int(w["stalled"]))
        for w in as_list(json.loads(reply))
    ]


def worker_jobs(reply: str) -> WorkerJobs:
    obj = json.loads(reply)
    return WorkerJobs(
        jobs=tuple(str(jid) for jid in as_list(obj.get("jobs"))),
        stalled=tuple(str(jid) for jid in as_list(obj.get("stalled"))),
    )


def recurring(reply: str) -> RecurringJob:
    obj = json.loads(reply)
    return RecurringJob(
        jid=obj["jid"],
        klass=obj["klass"],
        queue=obj["queue"],
        data=obj.get("data") or "{}",
        priority=int(obj.get("priority") or 0),
        tags=tuple(as_list(obj.get("tags"))),
        retries=int(obj.get("retries") or 0),
        interval=float(obj["interval"]),
        count=int(obj.get("count") or 0),
        backlog=int(obj.get("backlog") or 0),
    )


def groups(reply: str) -> dict[str, int]:
    """Failure groups and their sizes, by name."""
    found = json.loads(reply)
    if not isinstance(found, dict):
        return {}
    return {group: int(n) for group, n in sorted(found.items())}

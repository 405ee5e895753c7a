"""What the Redis engine sends its Lua core: checked command records as the core's argv.

Every command is `<command> <now> <args...>`; `text` writes each argument as the core
reads it. Lists go as JSON arrays, and a batch put as one JSON array of job objects.
`replies.py` is the way back.

A batch put's array is written by msgspec where it is installed (the `speed` extra): the
core decodes it, so only the values count, and they are the same (msgspec writes non-ASCII
characters as UTF-8 where `json` writes `\\u` escapes: the same strings once decoded). For
a chord of 10,000 no-op jobs it takes about 3 ms of CPU where `json` takes about 26.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from lanner import checks
from lanner.records import NewJob

Arg = str | int | float

_COMPACT = json.JSONEncoder(separators=(",", ":"))


def _array_writer() -> Callable[[list[dict[str, object]]], str]:
    """JSON text of a list of job objects: msgspec's where installed, else `json`'s."""
    try:
        import msgspec
    except ImportError:  # pragma: no cover - msgspec is in the dev extras
        return _COMPACT.encode
    encode = msgspec.json.Encoder().encode

    def write(objects: list[dict[str, object]]) -> str:
        try:
            return encode(objects).decode()
        except (TypeError, UnicodeEncodeError):  # e.g. a lone surrogate: json's escapes
            return _COMPACT.encode(objects)

    return write


_write_array = _array_writer()


def text(value: Arg) -> str:
    """An argument as the core reads it: floats with full precision."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def json_list(values: Sequence[str]) -> str:
    return json.dumps(list(values), separators=(",", ":"))


def put(job: NewJob, worker: str) -> list[Arg]:
    """qless's `put` (and `requeue`): options given only when not None (kept on a move)."""
    args: list[Arg] = [worker, job.queue, job.jid, job.klass, job.data, job.delay]
    if job.priority is not None:
        args += ["priority", job.priority]
    if job.retries is not None:
        args += ["retries", job.retries]
    if job.tags is not None:
        args += ["tags", json_list(job.tags)]
    if job.depends is not None:
        args += ["depends", json_list(job.depends)]
    if job.if_exists != "move":
        args += ["if_exists", job.if_exists]
    if job.expires_at is not None:
        args += ["expires_at", job.expires_at]
    if job.flow is not None:
        args += ["flow", job.flow.encoded()]
    return args


def put_many(jobs: Sequence[NewJob]) -> str:
    """`lanner.put_many`'s one argument: the jobs as JSON objects, defaults left out."""
    objects = []
    for job in jobs:  # each field by name: 10,000 jobs in a large chord's one put
        spec: dict[str, object] = {
            "queue": job.queue, "jid": job.jid, "klass": job.klass, "data": job.data,
            "delay": job.delay,
        }  # fmt: skip
        if job.priority is not None:
            spec["priority"] = job.priority
        if job.tags is not None:
            spec["tags"] = job.tags
        if job.retries is not None:
            spec["retries"] = job.retries
        if job.depends is not None:
            spec["depends"] = job.depends
        if job.if_exists != "move":
            spec["if_exists"] = job.if_exists
        if job.expires_at is not None:
            spec["expires_at"] = job.expires_at
        if job.flow is not None:
            spec["flow"] = job.flow.encoded()
        objects.append(spec)
    return _write_array(objects)


def complete(command: checks.Complete) -> list[Arg]:
    args: list[Arg] = [command.jid, command.worker, command.queue, command.data or ""]
    if command.next is not None:
        args += ["next", command.next, "delay", command.delay]
        if command.depends is not None:
            args += ["depends", json_list(command.depends)]
    if command.result is not None:
        args += ["result", command.result]
    return args


def retry(command: checks.Retry) -> list[Arg]:
    args: list[Arg] = [command.jid, command.queue, command.worker, command.delay]
    if command.group is not None or command.message is not None:
        # qless takes a message only with a group: name the default group then.
        args.append(command.group or f"failed-retries-{command.queue}")
        if command.message is not None:
            args.append(command.message)
    return args


def optional(*args: Arg | None) -> list[Arg]:
    """Arguments up to the first None (the core's optional trailing arguments)."""
    given: list[Arg] = []
    for arg in args:
        if arg is None:
            break
        given.append(arg)
    return given


def page(command: checks.Page, verb: str | None = None) -> list[Arg]:
    """A page of a failure group or a tag, or of the top tags: [verb] [key] offset count."""
    args: list[Arg] = [] if verb is None else [verb]
    if command.key:
        args.append(command.key)
    return [*args, command.offset, command.limit]


def recur(command: checks.Recur) -> list[Arg]:
    return [
        command.queue, command.jid, command.klass, command.data,
        "interval", command.interval, command.offset,
        "priority", command.priority,
        "tags", json_list(command.tags),
        "retries", command.retries,
        "backlog", command.backlog,
    ]  # fmt: skip


def recur_update(command: checks.RecurUpdate) -> list[Arg]:
    args: list[Arg] = [command.jid]
    for key, value in command.changes.items():
        args += [key, value]
    return args

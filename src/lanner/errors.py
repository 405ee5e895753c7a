"""Every error lanner raises on purpose, in one tree.

LannerError
├── Unsupported                    the engine does not have this capability
├── MalformedArgument              a bad value or type (also a ValueError); nothing changed
│   ├── InvalidName                a queue, group, tag or worker name breaks the naming rule
│   ├── PayloadTooLarge            job data over the engine's size limit; nothing was stored
│   │   └── ChubbyTaskException    Kale's name, raised by publishing
│   ├── ArgumentError              a task argument the codec cannot carry
│   │   └── ResultError            a task's return value JSON cannot carry
│   │       └── ResultTooLarge     ... or that is larger than the engine keeps
│   ├── ConfigError                a setting, a settings module or a queue config file is wrong
│   │                              (Kale's name for it: ImproperlyConfiguredException)
│   ├── TimeOutOfRange             a delay, interval, lease or time past lanner's bounds
│   │                              (`lanner.limits`: a job due more than ten years ahead)
│   ├── InvalidTaskDelayException  Kale's: a publish asked for a delay the queue cannot honour
│   └── InvalidTimeLimitTaskException
│                                  Kale's: a task's time limit does not fit its queue's lease
├── JobNotFound                    no job with that jid (also a LookupError)
├── QueueFull                      a bounded queue refused a put (its max-items or max-size)
├── InvalidState                   the job is in the wrong state for the command
│   └── LockLost                   the job is not running under this worker (or queue) any more
├── EngineUnavailable              the store cannot be reached now (retrying later may work)
├── StoreMisconfigured             the store refuses lanner as configured (a wrong password,
│   │                              a file that is not a database): waiting cannot fix it
│   └── SchemaError                the store was written by another application, or by an
│                                  incompatible lanner
├── DecodeError                    a job's data cannot become task arguments; `group` says why
│   └── BadSignature               a signed payload whose signature does not match
├── TaskException                  Kale's: about running tasks
│   ├── BlacklistedException       raised by `Task._check_blacklist`; never retried
│   ├── TimeoutException           Kale's name for running too long
│   │   └── TimeLimitExceeded      raised inside a task at its `time_limit`
│   └── JobCancelled               raised inside a task whose job was cancelled, or whose
│                                  lock was lost: it must stop, nothing of it is kept
└── TaskFailed                     a job waited for (`handle.result()`) failed

`lanner.exceptions` is Kale's import path for the Kale names; `import lanner` gives them all.
"""

from __future__ import annotations

from typing import Any


class LannerError(Exception):
    """Base class of every error lanner raises on purpose."""


_WHAT_IT_TAKES = {
    "lookup": "find a job by its id",
    "cancel": "cancel a job",
    "listing": "list or peek at the jobs of a queue without taking them",
    "failures": "count, list or put back failed jobs",
    "config": "keep settings other than a queue's lock (<queue>-heartbeat)",
    "workers": "say which worker holds which job, or settle a job from another process",
    "wait": "wait for a job to finish",
    "priority": "order a queue's jobs by priority",
    "pause": "pause a queue",
    "timeout": "force a job's lock to run out",
    "max-concurrency": "cap how many jobs of a queue run at once",
    "results": "keep what a task returned",
    "unique": "keep one live job per id",
    "flow": "hold jobs back by rate limit or concurrency key in the store",
    "fairness": "make a queue's jobs of different fair keys take turns",
}
"""What a capability lets an engine do, as `Unsupported` says it is missing."""


class Unsupported(LannerError):
    """The engine does not support this command; see its `capabilities`."""

    def __init__(self, engine: str, command: str, capability: str, reason: str = "") -> None:
        """`reason`, if given, says why in place of the missing capability (a command the
        engine has, refused for one of its arguments: "the sqs engine cannot ...")."""
        what = _WHAT_IT_TAKES.get(capability)
        if reason:
            text = f"the {engine} engine does not support {command!r}: {reason}"
        elif what:
            text = f"the {engine} engine cannot {what} ({command!r} needs {capability!r})"
        else:
            text = (
                f"the {engine} engine does not support {command!r} "
                f"(capability {capability!r} is not in its capabilities)"
            )
        super().__init__(text)
        self.engine = engine
        self.command = command
        self.capability = capability
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.engine, self.command, self.capability, self.reason))


class MalformedArgument(LannerError, ValueError):
    """A command was called with an argument of the wrong type or value."""


class InvalidName(MalformedArgument):
    """A name (queue, group, tag, worker) does not follow lanner's naming rule."""


class PayloadTooLarge(MalformedArgument):
    """Job data is larger than the engine accepts; nothing was stored."""


class ChubbyTaskException(PayloadTooLarge):
    """A task's payload is larger than the engine accepts (Kale's name)."""


class ArgumentError(MalformedArgument):
    """A task argument cannot travel with the chosen codec."""


class ResultError(ArgumentError):
    """A task's return value, to be kept with its job, cannot travel as JSON; the job fails
    into `group`, as under a worker so in eager mode."""

    group = "lanner-unserializable-result"


class ResultTooLarge(ResultError):
    """A task's return value, as JSON, is larger than the engine keeps (its
    `max_data_bytes`); the job fails into `group`."""

    group = "lanner-result-too-large"


class ConfigError(MalformedArgument):
    """A configuration value is wrong: in a queue config file, a settings module, the environment.

    The message starts with where the problem is, when that is known. The parts are also kept:
    `source` (a file, a settings module, "environment", ...), `queue` (a queue's name) and
    `field` (a queue field or a setting name); `problem` is the message without the location.
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str | None = None,
        queue: str | None = None,
        field: str | None = None,
    ) -> None:
        location = [source] if source else []
        if queue is not None:
            location.append(f"queue {queue!r}")
        super().__init__(": ".join([*location, problem]))
        self.problem = problem
        self.source = source
        self.queue = queue
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only arguments would be lost by BaseException's default pickling.
        return (_rebuild_config_error, (self.problem, self.source, self.queue, self.field))


def _rebuild_config_error(
    problem: str, source: str | None, queue: str | None, field: str | None
) -> ConfigError:
    return ConfigError(problem, source=source, queue=queue, field=field)


ImproperlyConfiguredException = ConfigError
"""Kale's name for a configuration error."""


class TimeOutOfRange(MalformedArgument):
    """A delay, interval, lease or Unix time past lanner's bounds (`lanner.limits`): a job
    due more than ten years ahead, or at a date no one could show; nothing was stored."""


class InvalidTaskDelayException(MalformedArgument):
    """A publish asked for a delay the queue cannot honour (Kale's name)."""


class InvalidTimeLimitTaskException(MalformedArgument):
    """A task's time limit does not fit in its queue's visibility timeout (Kale's name)."""


class JobNotFound(LannerError, LookupError):
    """No job has this jid."""

    def __init__(self, jid: str, command: str) -> None:
        super().__init__(f"{command}(): job {jid!r} does not exist")
        self.jid = jid
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.jid, self.command))


class QueueFull(LannerError):
    """A put was refused: the queue is at its `max-items` or `max-size` and does not discard
    old items to make room (`<queue>-discard-old-when-full`). Nothing was stored."""


class InvalidState(LannerError):
    """The job is not in a state that allows the command."""


class LockLost(InvalidState):
    """The caller no longer holds the job's lock: it expired, moved, or went to another worker."""


class EngineUnavailable(LannerError):
    """The engine's store could not be reached (after the engine's own retries)."""


class StoreMisconfigured(LannerError):
    """The store answered, and refuses lanner as configured: a wrong or missing password, a
    user without the permissions lanner needs, credentials the service rejects, a file that
    is not a database. Unlike `EngineUnavailable`, waiting cannot fix it: a worker pool
    stops with it rather than wait. The message names the store (never its password) and
    what to fix."""


class SchemaError(StoreMisconfigured):
    """The store's schema cannot be used by this version of lanner (or is not lanner's)."""


class DecodeError(LannerError):
    """A job's data cannot be turned back into task arguments; `group` says why."""

    group = "lanner-undecodable"


class BadSignature(DecodeError):
    """A signed payload's signature does not match: it is never loaded."""

    group = "lanner-bad-signature"


class TaskException(LannerError):
    """Base of the exceptions about running tasks (Kale's)."""


class BlacklistedException(TaskException):
    """Raised by `Task._check_blacklist` to refuse a task; never retried."""


class TimeoutException(TaskException):
    """Kale's name for a task that ran past its time limit."""


class TimeLimitExceeded(TimeoutException):
    """A task ran past its `time_limit`: raised inside the task (SIGALRM), then retried."""


class JobCancelled(TaskException):
    """Raised inside a running task whose job was cancelled, or handed to another worker.

    The task should stop; the worker completes, retries or fails nothing of that run.
    """


class TaskFailed(LannerError):
    """The job waited for failed: `group` and `message` are its failure's."""

    def __init__(self, jid: str, group: str, message: str) -> None:
        last = message.strip().splitlines()[-1] if message.strip() else ""
        super().__init__(f"job {jid} failed into {group}" + (f": {last}" if last else ""))
        self.jid = jid
        self.group = group
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.jid, self.group, self.message))


def exception_group(error: BaseException) -> str:
    """The failure group of an exception: its class name if built in or lanner's own (so that
    a soft and a hard time limit share `TimeLimitExceeded`), else module.qualname."""
    kind = type(error)
    if kind.__module__ in ("builtins", "lanner.errors"):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"

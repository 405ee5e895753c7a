"""Exceptions a task may raise or catch, under Kale's names so Kale task modules keep working.

`from kale import exceptions` becomes `from lanner import exceptions`.
"""

from __future__ import annotations

from lanner.errors import LannerError, MalformedArgument


class TaskException(LannerError):
    """Base of the exceptions about running tasks."""


class BlacklistedException(TaskException):
    """Raised by `Task._check_blacklist` to refuse a task; never retried."""


class TimeoutException(TaskException):
    """Kale's name for a task that ran past its time limit."""


class TimeLimitExceeded(TimeoutException):
    """A task ran past its `time_limit`: raised inside the task (SIGALRM), then retried."""


class ChubbyTaskException(MalformedArgument):
    """A task's payload is larger than the engine accepts (Kale's name)."""


class InvalidTaskDelayException(MalformedArgument):
    """A publish asked for a delay the queue cannot honour."""


class InvalidTimeLimitTaskException(MalformedArgument):
    """A task's time limit does not fit in its queue's visibility timeout."""


class ImproperlyConfiguredException(LannerError):
    """lanner's configuration is missing or wrong."""

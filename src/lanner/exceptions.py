"""Kale's import path for the exceptions a task may raise or catch.

`from kale import exceptions` becomes `from lanner import exceptions`. The classes live in
`lanner.errors`, with the rest of lanner's error tree.
"""

from lanner.errors import (
    BlacklistedException,
    ChubbyTaskException,
    ImproperlyConfiguredException,
    InvalidTaskDelayException,
    InvalidTimeLimitTaskException,
    TaskException,
    TimeLimitExceeded,
    TimeoutException,
)

__all__ = [
    "BlacklistedException",
    "ChubbyTaskException",
    "ImproperlyConfiguredException",
    "InvalidTaskDelayException",
    "InvalidTimeLimitTaskException",
    "TaskException",
    "TimeLimitExceeded",
    "TimeoutException",
]

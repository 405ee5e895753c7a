"""Lanner's exception tree, shared by every engine.

LannerError
├── Unsupported            the engine does not have this capability
├── MalformedArgument      a caller passed a bad value or type (also a ValueError)
│   ├── InvalidName        a queue, group, tag or worker name breaks the naming rule
│   └── PayloadTooLarge    job data over the engine's size limit
├── JobNotFound            no job with that jid (also a LookupError)
├── InvalidState           the job exists but is in the wrong state for the command
│   └── LockLost           the job is not running under this worker (or queue) any more
├── EngineUnavailable      the store cannot be reached now (retrying later may work)
└── SchemaError            the store was written by an incompatible lanner
"""

from __future__ import annotations


class LannerError(Exception):
    """Base class of every error lanner raises on purpose."""


class Unsupported(LannerError):
    """The engine does not support this command; see its `capabilities`."""

    def __init__(self, engine: str, command: str, capability: str) -> None:
        super().__init__(
            f"the {engine} engine does not support {command!r} "
            f"(capability {capability!r} is not in its capabilities)"
        )
        self.engine = engine
        self.command = command
        self.capability = capability


class MalformedArgument(LannerError, ValueError):
    """A command was called with an argument of the wrong type or value."""


class InvalidName(MalformedArgument):
    """A name (queue, group, tag, worker) does not follow lanner's naming rule."""


class PayloadTooLarge(MalformedArgument):
    """Job data is larger than the engine accepts; nothing was stored."""


class JobNotFound(LannerError, LookupError):
    """No job has this jid."""

    def __init__(self, jid: str, command: str) -> None:
        super().__init__(f"{command}(): job {jid!r} does not exist")
        self.jid = jid


class InvalidState(LannerError):
    """The job is not in a state that allows the command."""


class LockLost(InvalidState):
    """The caller no longer holds the job's lock: it expired, moved, or went to another worker."""


class EngineUnavailable(LannerError):
    """The engine's store could not be reached (after the engine's own retries)."""


class SchemaError(LannerError):
    """The store's schema cannot be used by this version of lanner."""

"""Lanner: distributed background tasks on priority queues.

`import lanner` gives the whole public API, `__all__` (tests/unit/test_public_api.py pins
it, and the docs use nothing else). Only the error tree is loaded at import; every other
name is loaded on first use, so that `import lanner` costs a few milliseconds and pulls in
no engine, YAML parser or process machinery it does not need. Kale's module paths
`lanner.task` and `lanner.exceptions` work too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lanner._version import __version__
from lanner.errors import (
    ArgumentError,
    BadSignature,
    BlacklistedException,
    ChubbyTaskException,
    ConfigError,
    DecodeError,
    EngineUnavailable,
    ImproperlyConfiguredException,
    InvalidName,
    InvalidState,
    InvalidTaskDelayException,
    InvalidTimeLimitTaskException,
    JobCancelled,
    JobNotFound,
    LannerError,
    LockLost,
    MalformedArgument,
    PayloadTooLarge,
    QueueFull,
    ResultError,
    ResultTooLarge,
    SchemaError,
    StoreMisconfigured,
    TaskException,
    TaskFailed,
    TimeLimitExceeded,
    TimeoutException,
    TimeOutOfRange,
    Unsupported,
)

if TYPE_CHECKING:
    from lanner.app import App, set_default_app
    from lanner.codec import JSONCodec, SignedPickleCodec
    from lanner.context import current_job
    from lanner.engine import CONFIG_DEFAULTS, Capability, Engine
    from lanner.engines import open_engine
    from lanner.events import EventStream
    from lanner.flow import Debounce
    from lanner.handle import JobHandle
    from lanner.job import Failure, HistoryEvent, Job, JobState
    from lanner.operations import drain, list_jobs, retry_failed
    from lanner.progress import Progress
    from lanner.queues import QueueConfig, load_queue_config
    from lanner.records import (
        DEFAULT_RETRIES,
        ConfigValue,
        Event,
        Flow,
        JobOutcome,
        JobPage,
        NewJob,
        QueueCounts,
        QueueStats,
        QueueUsage,
        RateLimit,
        RecurringJob,
        TimingStats,
        WorkerCounts,
        WorkerJobs,
    )
    from lanner.settings import Settings, load_settings
    from lanner.task import Task
    from lanner.worker.pool import PoolCounts, WorkerPool
    from lanner.workflows import ParentFailed, Signature, WorkflowHandle, chain, chord, group

_LAZY: dict[str, str] = {
    "App": "lanner.app",
    "set_default_app": "lanner.app",
    "Task": "lanner.task",
    "Debounce": "lanner.flow",
    "JobHandle": "lanner.handle",
    "current_job": "lanner.context",
    "WorkerPool": "lanner.worker.pool",
    "PoolCounts": "lanner.worker.pool",
    "Settings": "lanner.settings",
    "load_settings": "lanner.settings",
    "QueueConfig": "lanner.queues",
    "load_queue_config": "lanner.queues",
    "JSONCodec": "lanner.codec",
    "SignedPickleCodec": "lanner.codec",
    "Engine": "lanner.engine",
    "Capability": "lanner.engine",
    "CONFIG_DEFAULTS": "lanner.engine",
    "open_engine": "lanner.engines",
    "Job": "lanner.job",
    "Progress": "lanner.progress",
    "JobState": "lanner.job",
    "Failure": "lanner.job",
    "HistoryEvent": "lanner.job",
    "NewJob": "lanner.records",
    "Flow": "lanner.records",
    "RateLimit": "lanner.records",
    "Event": "lanner.records",
    "EventStream": "lanner.events",
    "JobPage": "lanner.records",
    "JobOutcome": "lanner.records",
    "QueueCounts": "lanner.records",
    "QueueStats": "lanner.records",
    "QueueUsage": "lanner.records",
    "TimingStats": "lanner.records",
    "RecurringJob": "lanner.records",
    "WorkerCounts": "lanner.records",
    "WorkerJobs": "lanner.records",
    "ConfigValue": "lanner.records",
    "DEFAULT_RETRIES": "lanner.records",
    "drain": "lanner.operations",
    "list_jobs": "lanner.operations",
    "retry_failed": "lanner.operations",
    "chain": "lanner.workflows",
    "group": "lanner.workflows",
    "chord": "lanner.workflows",
    "Signature": "lanner.workflows",
    "WorkflowHandle": "lanner.workflows",
    "ParentFailed": "lanner.workflows",
}
"""Public names loaded on first use, and the module each comes from."""

__all__ = [
    "CONFIG_DEFAULTS",
    "DEFAULT_RETRIES",
    "App",
    "ArgumentError",
    "BadSignature",
    "BlacklistedException",
    "Capability",
    "ChubbyTaskException",
    "ConfigError",
    "ConfigValue",
    "Debounce",
    "DecodeError",
    "Engine",
    "EngineUnavailable",
    "Event",
    "EventStream",
    "Failure",
    "Flow",
    "HistoryEvent",
    "ImproperlyConfiguredException",
    "InvalidName",
    "InvalidState",
    "InvalidTaskDelayException",
    "InvalidTimeLimitTaskException",
    "JSONCodec",
    "Job",
    "JobCancelled",
    "JobHandle",
    "JobNotFound",
    "JobOutcome",
    "JobPage",
    "JobState",
    "LannerError",
    "LockLost",
    "MalformedArgument",
    "NewJob",
    "ParentFailed",
    "PayloadTooLarge",
    "PoolCounts",
    "Progress",
    "QueueConfig",
    "QueueCounts",
    "QueueFull",
    "QueueStats",
    "QueueUsage",
    "RateLimit",
    "RecurringJob",
    "ResultError",
    "ResultTooLarge",
    "SchemaError",
    "Settings",
    "Signature",
    "SignedPickleCodec",
    "StoreMisconfigured",
    "Task",
    "TaskException",
    "TaskFailed",
    "TimeLimitExceeded",
    "TimeOutOfRange",
    "TimeoutException",
    "TimingStats",
    "Unsupported",
    "WorkerCounts",
    "WorkerJobs",
    "WorkerPool",
    "WorkflowHandle",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "drain",
    "group",
    "list_jobs",
    "load_queue_config",
    "load_settings",
    "open_engine",
    "retry_failed",
    "set_default_app",
]

if not TYPE_CHECKING:  # for type checkers every name above is imported as it is

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'lanner' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # once loaded, an ordinary attribute
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

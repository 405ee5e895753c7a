"""Lanner: distributed background tasks on priority queues.

The public surface is what `__all__` lists (tests/unit/test_public_api.py pins it).
"""

from lanner._version import __version__
from lanner.engine import CONFIG_DEFAULTS, Capability, Engine
from lanner.engines import open_engine
from lanner.errors import (
    EngineUnavailable,
    InvalidName,
    InvalidState,
    JobNotFound,
    LannerError,
    LockLost,
    MalformedArgument,
    PayloadTooLarge,
    SchemaError,
    Unsupported,
)
from lanner.job import Failure, HistoryEvent, Job, JobState
from lanner.records import (
    DEFAULT_RETRIES,
    ConfigValue,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    RecurringJob,
    TimingStats,
    WorkerCounts,
    WorkerJobs,
)

__all__ = [
    "CONFIG_DEFAULTS",
    "DEFAULT_RETRIES",
    "Capability",
    "ConfigValue",
    "Engine",
    "EngineUnavailable",
    "Failure",
    "HistoryEvent",
    "InvalidName",
    "InvalidState",
    "Job",
    "JobNotFound",
    "JobPage",
    "JobState",
    "LannerError",
    "LockLost",
    "MalformedArgument",
    "NewJob",
    "PayloadTooLarge",
    "QueueCounts",
    "QueueStats",
    "RecurringJob",
    "SchemaError",
    "TimingStats",
    "Unsupported",
    "WorkerCounts",
    "WorkerJobs",
    "__version__",
    "open_engine",
]

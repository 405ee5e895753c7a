"""The public surface is deliberate: what the docs use, pinned, and loaded only when used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lanner

PUBLIC = {
    # writing and publishing tasks
    "App", "Task", "set_default_app", "JSONCodec", "SignedPickleCodec",
    # following a published job, and a running task's own job
    "JobHandle", "current_job",
    # workflows: Celery's canvas on the engine's dependencies
    "chain", "group", "chord", "Signature", "WorkflowHandle", "ParentFailed",
    # running them, and operations of several engine calls
    "WorkerPool", "PoolCounts", "drain", "retry_failed", "list_jobs",
    # configuration
    "Settings", "load_settings", "QueueConfig", "load_queue_config",
    # the engine contract and its values
    "Engine", "open_engine", "Capability", "CONFIG_DEFAULTS", "DEFAULT_RETRIES", "ConfigValue",
    "Job", "JobState", "Failure", "HistoryEvent", "NewJob", "JobPage", "JobOutcome", "QueueCounts",
    "Progress",
    "QueueStats", "QueueUsage", "TimingStats", "RecurringJob", "WorkerCounts", "WorkerJobs",
    "Event", "EventStream", "Flow", "RateLimit", "Debounce",
    # the error tree (lanner.errors), Kale's names included
    "LannerError", "Unsupported", "MalformedArgument", "InvalidName", "PayloadTooLarge",
    "ChubbyTaskException", "ArgumentError", "ConfigError", "ImproperlyConfiguredException",
    "InvalidTaskDelayException", "InvalidTimeLimitTaskException", "JobNotFound", "InvalidState",
    "QueueFull", "LockLost", "EngineUnavailable", "StoreMisconfigured", "SchemaError",
    "DecodeError", "BadSignature",
    "TaskException", "BlacklistedException", "TimeoutException", "TimeLimitExceeded",
    "JobCancelled", "TaskFailed", "ResultError", "ResultTooLarge", "TimeOutOfRange",
    "__version__",
}  # fmt: skip


def test_all_lists_exactly_the_public_names() -> None:
    assert set(lanner.__all__) == PUBLIC
    assert sorted(lanner.__all__) == sorted(set(lanner.__all__)), "no name twice"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_resolves_and_is_listed_by_dir(name: str) -> None:
    assert getattr(lanner, name) is not None
    assert name in dir(lanner)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Ap'"):
        _ = lanner.Ap  # type: ignore[attr-defined]


def test_every_error_is_a_lanner_error() -> None:
    for name in lanner.__all__:
        value = getattr(lanner, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, lanner.LannerError), name


def test_kale_module_paths_still_work() -> None:
    from lanner import exceptions, message, publisher, task, test_utils, worker

    assert task.Task is lanner.Task
    assert exceptions.TimeLimitExceeded is lanner.TimeLimitExceeded
    assert worker.Worker.__name__ == "Worker"
    assert issubclass(test_utils.MockMessage, message.KaleMessage)
    assert task.Task._get_publisher().__class__ is publisher.Publisher


def test_import_lanner_loads_nothing_heavy() -> None:
    """`import lanner` loads the error tree only; the rest comes on first use."""
    probe = (
        "import sys, lanner; "
        "print(','.join(sorted(m for m in sys.modules if m.partition('.')[0] in "
        "('lanner', 'yaml', 'sqlite3', 'rich', 'click', 'multiprocessing', 'redis'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded.split(",") == ["lanner", "lanner._version", "lanner.errors"]

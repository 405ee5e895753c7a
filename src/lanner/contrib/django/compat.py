"""Django's task API, wherever this Django has it: `django.tasks` (Django 6 and later), else
the `django-tasks` backport's `django_tasks` (Django 5.2, on Python 3.11). The two have
the same classes and functions; only a few names differ, chosen here.

Django ships no type hints, so what this module exports is typed `Any`.
"""

from __future__ import annotations

import importlib
from typing import Any

try:
    _base: Any = importlib.import_module("django.tasks.base")
except ImportError:  # Django before 6: the backport, or nothing
    try:
        _base = importlib.import_module("django_tasks.base")
    except ImportError:
        raise ImportError(
            "lanner.contrib.django needs Django >= 6, or Django 5.2 with the django-tasks "
            "backport: pip install 'lanner[django]'"
        ) from None

PACKAGE: str = _base.__name__.rsplit(".", 1)[0]
"""`django.tasks` or `django_tasks`: whose API this is."""

_backends: Any = importlib.import_module(f"{PACKAGE}.backends.base")
_exceptions: Any = importlib.import_module(f"{PACKAGE}.exceptions")
_signals: Any = importlib.import_module(f"{PACKAGE}.signals")

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
InvalidTask: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
InvalidTaskBackend: Any = (
    getattr(_exceptions, "InvalidTaskBackend", None) or _exceptions.InvalidTaskBackendError
)
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished


def normalize_json(value: Any) -> Any:
    """Django's own normalisation of task arguments and return values to JSON types."""
    where = "django.utils.json" if PACKAGE == "django.tasks" else "django_tasks.utils"
    return importlib.import_module(where).normalize_json(value)


def task_backends() -> Any:
    """The backends of the TASKS setting, by alias."""
    return importlib.import_module(PACKAGE).task_backends

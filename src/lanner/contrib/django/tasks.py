"""The lanner task behind each Django task, and how a worker runs it.

Every Django task a `LannerBackend` validates (Django validates each task when it is
defined, and again for each `using()`) gets a `lanner.Task` subclass registered under the
task's module path, which is the `klass` of its jobs: a worker that pops such a job
imports the task's module (Django is set up there: `manage.py lanner_worker`), which
defines the Django task again, and so registers the class that runs it.

The class runs the Django task's function with the job's arguments (`async def` ones on
the worker's event loop), gives it a `TaskContext` if it takes one, closes the database
connections Django considers old before and after (as Django does around a request), and
sends Django's `task_started` and `task_finished` signals. What the function returns is
normalised as Django does, then kept as the job's result.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from lanner.context import current_job
from lanner.contrib.django import compat
from lanner.contrib.django.results import class_path, task_result
from lanner.task import Task, find_task

if TYPE_CHECKING:
    from lanner.contrib.django.backend import LannerBackend


def lanner_task_for(backend: LannerBackend, django_task: Any) -> type[Task]:
    """The lanner task class of `django_task` on `backend` (made and registered once)."""
    name: str = django_task.module_path
    known = find_task(name, import_module=False)
    if known is not None and getattr(known, "django_backend", None) == backend.alias:
        return known
    function = django_task.func
    alias = backend.alias

    def run(self: Task, *args: Any, **kwargs: Any) -> Any:
        task, result = _started(alias, name, django_task)
        arguments = (compat.TaskContext(task_result=result), *args) if task.takes_context else args
        _close_old_connections()
        try:
            value = compat.normalize_json(task.call(*arguments, **kwargs))
        except BaseException as error:
            _finished(result, error)
            raise
        finally:
            _close_old_connections()
        _finished(result, None, value)
        return value

    async def run_async(self: Task, *args: Any, **kwargs: Any) -> Any:
        task, result = _started(alias, name, django_task)
        arguments = (compat.TaskContext(task_result=result), *args) if task.takes_context else args
        try:
            value = compat.normalize_json(await task.acall(*arguments, **kwargs))
        except BaseException as error:
            _finished(result, error)
            raise
        _finished(result, None, value)
        return value

    attributes = {
        "queue": None,
        "max_retries": backend.retries,
        "time_limit": backend.time_limit,
        "target_runtime": backend.time_limit,
        "keep_result": True,
        "app": backend.app,
        "run_task": run_async if inspect.iscoroutinefunction(function) else run,
        "django_backend": alias,
        "__module__": function.__module__,
        "__qualname__": function.__qualname__,
        "__doc__": function.__doc__,
    }
    return type(function.__name__, (Task,), attributes, name=name)


def _started(alias: str, name: str, task: Any) -> tuple[Any, Any]:
    """The Django task as its job was enqueued (priority, queue, `run_after`), and the
    result of the job about to run it, sent with `task_started`."""
    job = current_job()
    if job is None:  # run outside a worker (a test calling the class): no job to show
        raise RuntimeError(f"{name} runs as a lanner job only")
    result = task_result(job, alias, task)
    object.__setattr__(result, "status", compat.TaskResultStatus.RUNNING)
    compat.task_started.send(sender=_backend_class(), task_result=result)
    return result.task, result


def _finished(result: Any, error: BaseException | None, value: Any = None) -> None:
    """Send `task_finished` with what the run came to (inside the `except` of a failure,
    so that Django's own receiver logs the exception with its traceback)."""
    import traceback

    from django.utils import timezone

    object.__setattr__(result, "finished_at", timezone.now())
    if error is None:
        object.__setattr__(result, "status", compat.TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        object.__setattr__(result, "status", compat.TaskResultStatus.FAILED)
        kind = type(error)
        result.errors.append(
            compat.TaskError(
                exception_class_path=class_path(f"{kind.__module__}.{kind.__qualname__}"),
                traceback="".join(traceback.format_exception(error)),
            )
        )
    compat.task_finished.send(sender=_backend_class(), task_result=result)


def _backend_class() -> type:
    from lanner.contrib.django.backend import LannerBackend

    return LannerBackend


def _close_old_connections() -> None:
    from django.db import close_old_connections

    close_old_connections()

"""Tasks, Kale style: a class with `run_task`, published with `publish(app_data, *args)`.

A Kale task module runs on lanner by changing its imports only:

    from lanner import task                      # was: from kale import task

    class FibonacciTask(task.Task):
        queue = "default"
        max_retries = 3
        time_limit = 5

        def run_task(self, n, *args, **kwargs):
            ...

    FibonacciTask.publish(None, 10)

Every Task subclass registers itself under its dotted name (`module.ClassName`), which is
the job's `klass`: that is how a worker finds the code for a job. The decorator style
(`App.task`) builds such a class around a function, so both styles share this machinery.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import time
import traceback
import uuid
from typing import TYPE_CHECKING, Any, ClassVar, Final

from lanner.errors import BlacklistedException

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.codec import Payload
    from lanner.handle import JobHandle
    from lanner.job import Job

logger = logging.getLogger("lanner.task")

_REGISTRY: dict[str, type[Task]] = {}
_DOTTED_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def registered_tasks() -> dict[str, type[Task]]:
    """Every Task subclass defined so far, by dotted name."""
    return dict(_REGISTRY)


def find_task(name: str, *, import_module: bool = True) -> type[Task] | None:
    """The task class registered as `name`, importing its module first if needed.

    Only registered Task subclasses are ever returned, so a job naming some other
    importable callable runs nothing.
    """
    found = _REGISTRY.get(name)
    if found is not None or not import_module or not _DOTTED_NAME.fullmatch(name):
        return found
    module = name
    while "." in module:
        module = module.rsplit(".", 1)[0]
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        break
    return _REGISTRY.get(name)


class Task:
    """Base class of tasks. Override `run_task`; configure with the class attributes."""

    queue: ClassVar[str | None] = None
    """The queue the task is published to (Kale: required; lanner: defaults to 'default')."""
    max_retries: ClassVar[int | None] = 4
    """Retries after the first failure; None or 0: none."""
    time_limit: ClassVar[float] = 60
    """Seconds a run may take: then `TimeLimitExceeded` is raised inside it; a run still going
    `TIME_LIMIT_GRACE_SEC` later has its process killed."""
    target_runtime: ClassVar[float] = 50
    """Seconds after which `_alert_runtime_exceeded` is called (an alert only)."""
    priority: ClassVar[int] = 0
    """Priority of its jobs within the queue (higher first)."""
    EXCEPTION_LIST: ClassVar[tuple[type[BaseException], ...]] = (
        BlacklistedException,
        KeyError,
        NotImplementedError,
        SyntaxError,
        UnboundLocalError,
    )
    """Exceptions that are never retried: the job fails at once."""
    app: ClassVar[App | None] = None
    """The app that publishes it; None: the default app, built from configuration."""
    keep_result: ClassVar[bool | None] = None
    """Whether its jobs keep what `run_task` returns (`handle.result()`); None: the app's
    `results` setting."""
    name: ClassVar[str] = "lanner.task.Task"
    """The dotted name jobs carry as `klass`; set for each subclass."""

    def __init_subclass__(cls, *, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name or f"{cls.__module__}.{cls.__qualname__}"
        _REGISTRY[cls.name] = cls

    def __init__(self, job: Job | None = None, payload: Payload | None = None) -> None:
        self.job = job
        self.task_id = job.jid if job is not None else None
        self.task_name = type(self).name
        self.app_data = payload.app_data if payload is not None else None
        self._start_time: float | None = None
        self._end_time: float | None = None
        self._task_latency_sec = 0.0
        self._dequeued()

    # -- publishing -----------------------------------------------------------------------
    @classmethod
    def publish(cls, app_data: Any, *args: Any, **kwargs: Any) -> JobHandle:
        """Publish a run of this task; return its job's handle (its id, a str).

        As in Kale, `delay_sec` in kwargs delays the job and is also passed on to run_task.
        """
        delay = kwargs.get("delay_sec") or 0
        return cls._publishing_app().publish(
            cls, args, kwargs, app_data=app_data, delay=float(delay)
        )

    @classmethod
    def _publishing_app(cls) -> App:
        """Its `app`, else the App its module names `app`, else the default app."""
        from lanner.app import app_of, default_app

        return app_of(cls) or default_app()

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        """The jid of a new run; override for deterministic ids."""
        return uuid.uuid4().hex

    # -- running --------------------------------------------------------------------------
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task with its hooks around it (the worker calls this)."""
        self._setup_task_environment()
        self._pre_run(*args, **kwargs)
        try:
            self._check_blacklist(*args, **kwargs)
            result = self.run_task(*args, **kwargs)
            if inspect.isawaitable(result):  # an async task: done only once it finished
                from lanner import aio

                result = aio.run(result)
        except BaseException as error:
            self._end_time = time.monotonic()
            self._task_latency_sec = self._end_time - (self._start_time or self._end_time)
            self._clean_task_environment(self.task_id, self.task_name, error)
            raise
        self._post_run(*args, **kwargs)
        self._clean_task_environment(self.task_id, self.task_name)
        return result

    def run_task(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).name} must implement run_task()")

    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        """False defers the job: it is given back and tried again after a delay."""
        return True

    @classmethod
    def keeps_result(cls, app: App) -> bool:
        return app.results if cls.keep_result is None else cls.keep_result

    @classmethod
    def is_retryable(cls, error: BaseException) -> bool:
        return not isinstance(error, cls.EXCEPTION_LIST)

    # -- hooks (Kale's), no-ops unless overridden -----------------------------------------
    def _dequeued(self) -> None:
        pass

    def _setup_task_environment(self) -> None:
        pass

    def _clean_task_environment(
        self,
        task_id: str | None = None,
        task_name: str | None = None,
        exc: BaseException | None = None,
    ) -> None:
        pass

    def _pre_run(self, *args: Any, **kwargs: Any) -> None:
        self._start_time = time.monotonic()

    def _post_run(self, *args: Any, **kwargs: Any) -> None:
        self._end_time = time.monotonic()
        self._task_latency_sec = self._end_time - (self._start_time or self._end_time)
        if self._task_latency_sec >= self.target_runtime:
            self._alert_runtime_exceeded()

    def _check_blacklist(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _alert_runtime_exceeded(self) -> None:
        logger.warning(
            "task %s %s ran %.1f s, more than its target_runtime %.1f s",
            self.task_name, self.task_id, self._task_latency_sec, self.target_runtime,
        )  # fmt: skip

    def _kill_runtime_exceeded(self) -> None:
        logger.warning(
            "task %s %s exceeded its time_limit of %s s", self.task_name, self.task_id,
            self.time_limit,
        )  # fmt: skip

    def _report_permanent_failure(
        self,
        message: str,
        exception: BaseException | None,
        failure_type: str,
        log_exception: bool = True,
    ) -> None:
        """Called once a job fails for good (no retry left, or an unretryable exception)."""
        details = "".join(traceback.format_exception(exception)) if exception else ""
        logger.error(
            "PERMANENT_TASK_FAILURE: FAILURE_TYPE=%s TASK_TYPE=%s TASK_ID=%s MESSAGE=%s%s",
            failure_type, self.task_name, self.task_id, message,
            f" TRACEBACK={details}" if log_exception and details else "",
        )  # fmt: skip

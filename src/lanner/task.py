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

Below `run`, Kale's failure policy is the class's too, and the worker goes through it:
`handle_failure(message, raised_exception)` decides whether a failed run is retried
(`republish`, after `_get_delay_sec_for_retry(n)` seconds) or fails for good
(`_report_permanent_failure`); a subclass overriding them changes what the worker does.
`message` is a `lanner.message.KaleMessage`, built from the job being settled.

Every Task subclass registers itself under its dotted name (`module.ClassName`), which is
the job's `klass`: that is how a worker finds the code for a job. The decorator style
(`App.task`) builds such a class around a function, so both styles share this machinery.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Final

from lanner.errors import BlacklistedException, InvalidState, TimeoutException
from lanner.job import Job
from lanner.message import KaleMessage, settling_message
from lanner.publisher import Publisher

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.codec import Payload
    from lanner.flow import Debounce
    from lanner.handle import JobHandle
    from lanner.settings import Settings
    from lanner.workflows.canvas import Signature

logger = logging.getLogger("lanner.task")

# Kale's failure types, given to `_report_permanent_failure`.
PERMANENT_FAILURE_UNRECOVERABLE: Final = "unrecoverable"  # an exception in EXCEPTION_LIST
PERMANENT_FAILURE_NO_RETRY: Final = "no_retries"  # the job has no retries at all
PERMANENT_FAILURE_RETRIES_EXCEEDED: Final = "max_retries"  # its retries are spent

_publisher: Publisher | None = None


def time_ordered_id() -> str:
    """A new jid: a version 7 UUID (RFC 9562) in hex, its first 48 bits the time in ms and
    74 random bits after.

    Time first because a store indexes jobs by jid: random jids put each new job at a
    random place in that index, so at a million jobs every job of a put_many dirtied a page
    of its own (SQLite's put_many fell from 25,000 to under 6,000 jobs/s); ids that grow
    with time go where the last ones went.
    """
    random_bits = int.from_bytes(os.urandom(10))  # the low 80 bits, 6 of them replaced
    value = (time.time_ns() // 1_000_000) << 80 | random_bits
    return f"{value & _UUID7_CLEARED | _UUID7_SET:032x}"


# The version (7) and variant (10, RFC 9562) bits of `time_ordered_id`, set in one step.
_UUID7_CLEARED: Final = ~(0xF << 76) & ~(0x3 << 62)
_UUID7_SET: Final = 0x7 << 76 | 0x2 << 62


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
    time_limit: ClassVar[float | None] = 60
    """Seconds a run may take: then `TimeLimitExceeded` is raised inside it; a run still going
    `TIME_LIMIT_GRACE_SEC` later has its process killed. None: no limit (Kale's classes
    default to 60; `@app.task` functions to None)."""
    target_runtime: ClassVar[float | None] = 50
    """Seconds after which `_alert_runtime_exceeded` is called (an alert only); None: never."""
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
    rate_limit: ClassVar[str | None] = None
    """FLOW: at most this many runs start per period, across all workers ("100/m"; per s,
    m, h or d); None: no limit (docs/flow-control.md)."""
    rate_key: ClassVar[str | Callable[..., object] | None] = None
    """The bucket `rate_limit` counts in: a str, or a callable of the run's arguments whose
    value names it (jobs naming the same key share it); None: the task's own."""
    concurrency_key: ClassVar[str | Callable[..., object] | None] = None
    """The key `max_concurrency` counts running jobs of (a str or a callable of the run's
    arguments, as `rate_key`); None: the task's own."""
    max_concurrency: ClassVar[int | None] = None
    """FLOW: at most this many jobs of its concurrency key run at once, anywhere."""
    debounce: ClassVar[Debounce | None] = None
    """FLOW: one waiting run per key for a window (`lanner.Debounce`); None: none."""
    fair_key: ClassVar[str | Callable[..., object] | None] = None
    """FLOW: jobs of its queue with different fair keys (a str, or a callable of the run's
    arguments: a tenant) take turns; None: it takes no part in the turns."""
    keep_result: ClassVar[bool | None] = None
    """Whether its jobs keep what `run_task` returns (`handle.result()`); None: the app's
    `results` setting."""
    name: ClassVar[str] = "lanner.task.Task"
    """The dotted name jobs carry as `klass`; set for each subclass."""
    _retry_delay_multiple: ClassVar[float | None] = None
    """Kale's per-task backoff unit: retry n waits `2**n` times this (capped by
    RETRY_DELAY_MAX_SEC); None: the settings' RETRY_DELAY_MULTIPLE_SEC."""

    def __init_subclass__(cls, *, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name or f"{cls.__module__}.{cls.__qualname__}"
        _REGISTRY[cls.name] = cls

    def __init__(
        self, job: Job | Mapping[str, Any] | None = None, payload: Payload | None = None
    ) -> None:
        """The worker makes a task from the job it runs and its decoded payload. Kale's
        form, a message body (`Task({"id": ..., "payload": {"app_data": ...}})`), works
        too, for tests written for Kale."""
        body: Mapping[str, Any] = {}
        if type(job) is not Job and isinstance(job, Mapping):  # a Job: no ABC check per job
            body, job = job, None
        self.job = job
        self.task_id: str | None = job.jid if job is not None else body.get("id")
        self.task_name = type(self).name
        # A workflow's step keeps its result whatever its task says: the next step reads it.
        self.in_workflow = payload is not None and payload.workflow is not None
        if payload is not None:
            self.app_data = payload.app_data
        else:
            self.app_data = (body.get("payload") or {}).get("app_data")
        self._publisher_data = body.get("_publisher")
        self._enqueued_time = body.get("_enqueued_time", 0)
        self._dequeued_time: float | None = None
        self._start_time: float | None = None
        self._end_time: float | None = None
        self._task_latency_sec = 0.0
        self._dequeued()

    # -- publishing -----------------------------------------------------------------------
    @classmethod
    def publish(cls, app_data: Any, *args: Any, **kwargs: Any) -> JobHandle:
        """Publish a run of this task; return its job's handle (its id, a str).

        As in Kale, `delay_sec` in kwargs delays the job and is also passed on to run_task,
        and the run goes through `Publisher.publish` under the id `_get_task_id` makes.
        """
        task_id = cls._get_task_id(*args, **kwargs)
        payload = {"args": args, "kwargs": kwargs, "app_data": app_data}
        return cls._get_publisher().publish(
            cls, task_id, payload, delay_sec=kwargs.get("delay_sec")
        )

    @classmethod
    async def apublish(cls, app_data: Any, *args: Any, **kwargs: Any) -> JobHandle:
        """`publish()` for async code: the same publish, through the same Publisher, made
        in a thread so that the event loop goes on meanwhile (`lanner.offload`)."""
        from lanner import offload

        return await offload.call(cls.publish, app_data, *args, **kwargs)

    @classmethod
    def s(cls, *args: Any, **kwargs: Any) -> Signature:
        """A signature of this task for a workflow (`lanner.chain`, ...): `run_task`'s
        arguments, after the previous step's result in a chain; `app_data` is None."""
        from lanner.workflows.canvas import Signature

        return Signature(cls, cls._publishing_app(), args, kwargs)

    @classmethod
    def si(cls, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: it runs after the previous step, without its result."""
        from lanner.workflows.canvas import Signature

        return Signature(cls, cls._publishing_app(), args, kwargs, immutable=True)

    @staticmethod
    def _get_publisher() -> Publisher:
        """The process's `lanner.publisher.Publisher` (Kale's, made on first use)."""
        global _publisher
        if _publisher is None:
            _publisher = Publisher()
        return _publisher

    @classmethod
    def _publishing_app(cls) -> App:
        """Its `app`, else the App its module names `app`, else the default app."""
        from lanner.app import app_of, default_app

        return app_of(cls) or default_app()

    @classmethod
    def _get_task_id(cls, *args: Any, **kwargs: Any) -> str:
        """The jid of a new run; override for deterministic ids."""
        return time_ordered_id()

    # -- failing, and retrying (Kale's policy; the worker goes through it) ---------------
    @classmethod
    def handle_failure(
        cls,
        message: KaleMessage,
        raised_exception: BaseException,
        increment_failure_num: bool = True,
    ) -> bool:
        """Retry the failed run, or report it failed for good; True if it will be retried.

        Kale's rules, counted against the job's own retry budget (`message.retries_allowed`,
        set at publish from `max_retries`): an exception in `EXCEPTION_LIST` is never
        retried (`unrecoverable`); a job without retries fails at its first error
        (`no_retries`); one whose retries are spent fails (`max_retries`). Otherwise
        `republish` runs it again, spending a retry unless `increment_failure_num` is False.
        The worker fails a job this returns False for into its exception's failure group.
        """
        task = message.task_inst
        if isinstance(raised_exception, TimeoutException) and task is not None:
            task._kill_runtime_exceeded()
        # Through the instance when there is one: an override written as an instance
        # method (lanner's first form of this hook) works as well as Kale's classmethod.
        report = (
            task._report_permanent_failure if task is not None else cls._report_permanent_failure
        )
        if not cls.is_retryable(raised_exception):
            report(message, raised_exception, PERMANENT_FAILURE_UNRECOVERABLE, True)
            return False
        allowed = message.retries_allowed
        if allowed <= 0:
            report(message, raised_exception, PERMANENT_FAILURE_NO_RETRY, True)
            return False
        if message.task_failure_num >= allowed:
            report(message, raised_exception, PERMANENT_FAILURE_RETRIES_EXCEEDED, False)
            return False
        failures = message.task_failure_num + (1 if increment_failure_num else 0)
        cls.republish(message, failures)
        return True

    @classmethod
    def republish(cls, message: KaleMessage, failure_num: int) -> None:
        """Run the task again after `_get_delay_sec_for_retry(message.task_retry_num)` s.

        As in Kale, through `Publisher.publish` with the same task id; for a job a worker
        holds, that retries the job in place (`lanner.publisher` says how).
        """
        if message.task_id is None:
            raise InvalidState(f"{cls.name}: a message without a task id cannot be republished")
        payload = {
            "args": message.task_args,
            "kwargs": message.task_kwargs,
            "app_data": message.task_app_data,
        }
        delay_sec = cls._get_delay_sec_for_retry(message.task_retry_num)
        cls._get_publisher().publish(
            cls,
            message.task_id,
            payload,
            current_retry_num=message.task_retry_num + 1,
            current_failure_num=failure_num,
            delay_sec=delay_sec,
        )

    @classmethod
    def _get_delay_sec_for_retry(cls, current_retry_num: int) -> float:
        """Seconds before retry `current_retry_num` (0 for the first):
        `min(2**n * RETRY_DELAY_MULTIPLE_SEC, RETRY_DELAY_MAX_SEC)` of the settings of the
        app whose worker settles the job (else of the task's app); `_retry_delay_multiple`,
        if set, replaces the multiple."""
        settings = cls._retry_settings()
        if cls._retry_delay_multiple is not None:
            settings = replace(settings, retry_delay_multiple_sec=cls._retry_delay_multiple)
        return settings.retry_delay(current_retry_num)

    @classmethod
    def _retry_settings(cls) -> Settings:
        message = settling_message()
        if message is not None and message.app is not None:
            return message.app.settings
        return cls._publishing_app().settings

    @classmethod
    def is_retryable(cls, error: BaseException) -> bool:
        return not isinstance(error, cls.EXCEPTION_LIST)

    # -- running --------------------------------------------------------------------------
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task with its hooks around it (the worker calls this)."""
        self._begin(*args, **kwargs)
        try:
            self._check_blacklist(*args, **kwargs)
            result = self.run_task(*args, **kwargs)
            # An async task: done only once it finished (None, a no-op's, is not asked:
            # `isawaitable` looks for the Awaitable ABC, a microsecond per job).
            if result is not None and inspect.isawaitable(result):
                from lanner.inprocess import coroutines

                result = coroutines.run(result)
        except BaseException as error:
            self._ended(error)
            raise
        self._post_run(*args, **kwargs)
        self._ended(None)
        return result

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        """`run` for an async task, awaited on the caller's event loop (a worker that runs
        many jobs at once): its hooks run as they do in `run`."""
        self._begin(*args, **kwargs)
        try:
            self._check_blacklist(*args, **kwargs)
            result = self.run_task(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as error:
            self._ended(error)
            raise
        self._post_run(*args, **kwargs)
        self._ended(None)
        return result

    @classmethod
    def runs_async(cls) -> bool:
        """Whether `run_task` is `async def`: it then shares its worker's event loop."""
        return inspect.iscoroutinefunction(cls.run_task)

    def _begin(self, *args: Any, **kwargs: Any) -> None:
        self._setup_task_environment()
        self._pre_run(*args, **kwargs)

    def _ended(self, error: BaseException | None) -> None:
        if error is None:
            self._clean_task_environment(task_id=self.task_id, task_name=self.task_name)
            return
        self._end_time = time.time()
        self._task_latency_sec = self._end_time - (self._start_time or self._end_time)
        # Keywords, as Kale passes them: overrides may take **kwargs.
        self._clean_task_environment(task_id=self.task_id, task_name=self.task_name, exc=error)

    def run_task(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).name} must implement run_task()")

    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        """False defers the job: it is given back and tried again after a delay."""
        return True

    @classmethod
    def keeps_result(cls, app: App) -> bool:
        return app.results if cls.keep_result is None else cls.keep_result

    # -- hooks (Kale's), no-ops unless overridden -----------------------------------------
    def _dequeued(self) -> None:
        self._dequeued_time = time.time()

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
        self._start_time = time.time()

    def _post_run(self, *args: Any, **kwargs: Any) -> None:
        self._end_time = time.time()
        self._task_latency_sec = self._end_time - (self._start_time or self._end_time)
        if self.target_runtime and self._task_latency_sec >= self.target_runtime:
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

    @classmethod
    def _report_permanent_failure(
        cls,
        message: KaleMessage,
        exception: BaseException | None,
        failure_type: str,
        log_exception: bool = True,
    ) -> None:
        """Called once a run fails for good, with Kale's failure type (`unrecoverable`,
        `no_retries` or `max_retries`); the job then fails into its failure group."""
        details = "".join(traceback.format_exception(exception)) if exception else ""
        logger.error(
            "PERMANENT_TASK_FAILURE: FAILURE_TYPE=%s TASK_TYPE=%s TASK_ID=%s MESSAGE=%s%s",
            failure_type, message.task_name, message.task_id, exception,
            f" TRACEBACK={details}" if log_exception and details else "",
        )  # fmt: skip

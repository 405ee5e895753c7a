"""The App: one explicit configuration (broker, queues, codec) and the tasks it publishes.

    app = lanner.App(broker="sqlite:///lanner.db")

    @app.task(queue="emails", max_retries=5, time_limit=30)
    def send_email(to: str, subject: str) -> None: ...

    send_email.delay("a@example.com", "hi")
    send_email.options(delay=60, priority=10, tags=["welcome"]).delay("b@example.com", "hi")
    app.publish_many([send_email.message("c@example.com", "x"), ...])   # one round trip
    await send_email.adelay("d@example.com", "hi")   # from async code: the loop goes on
    app.instrument(instrument)          # tracing, error reports (`lanner.instruments`)

Nothing connects at import time: the engine is opened on first use. A Kale-style task
class without an `app` publishes through the App its module defines as `app`, if any, else
through `default_app()`: the one set with `set_default_app`, or one built once per process
from the configuration (LANNER_SETTINGS_MODULE or Kale's KALE_SETTINGS_MODULE,
LANNER_BROKER, or the default `sqlite:///lanner.db`), which logs where it publishes.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from lanner import instruments
from lanner.checks import names
from lanner.codec import Codec, JobIdentity, JSONCodec, Payload, SignedPickleCodec, encode_json
from lanner.engine import Capability, Engine
from lanner.engines import open_engine, shown_url
from lanner.errors import (
    ChubbyTaskException,
    InvalidState,
    InvalidTimeLimitTaskException,
    MalformedArgument,
    PayloadTooLarge,
)
from lanner.flow import debounced, flow_of, other_turn, refuse_unheld
from lanner.handle import JobHandle
from lanner.prepared import Message, PublishArguments, PublishOptions
from lanner.queues import QueueConfig
from lanner.records import NewJob
from lanner.schedules import CatchUp, Schedule, periodic_decorator
from lanner.settings import Settings, configured_from_environment, load_settings
from lanner.task import Task, find_task, registered_tasks
from lanner.taskfunction import DEFAULT_QUEUE as DEFAULT_QUEUE  # its old home, kept
from lanner.taskfunction import (
    TaskArguments,
    TaskFunction,
    TaskOptions,
    task_class_for,
)

logger = logging.getLogger("lanner.app")

P = ParamSpec("P")
R = TypeVar("R")
_T = TypeVar("_T")

EAGER_MAX_DATA_BYTES = 10 * 1024 * 1024  # the engines' default

_random_id = Task._get_task_id.__func__  # type: ignore[attr-defined]


class App:
    """Where tasks are published, and how workers find their configuration."""

    def __init__(
        self,
        broker: str | Engine | None = None,
        *,
        settings: Settings | None = None,
        queues: Sequence[QueueConfig] | None = None,
        codec: Codec | None = None,
        results: bool = False,
        eager: bool = False,
    ) -> None:
        """`results`: whether tasks keep what they return, unless a task says otherwise
        (`@app.task(result=...)`, `keep_result` of a Task class). `eager`: publishing runs
        the task at once, in the publisher, through the same codec and checks (tests)."""
        self.settings = settings or load_settings()
        self.results = results
        self.eager = eager
        if isinstance(broker, str):
            self.settings = replace(self.settings, broker=broker)
        self._engine: Engine | None = None if isinstance(broker, str) or broker is None else broker
        self._queues = tuple(queues) if queues is not None else None
        self._queues_by_name: dict[str, QueueConfig] | None = None
        self.schedules: dict[str, Schedule] = {}
        """The schedules `@app.periodic` declared, by name (lanner.schedules)."""
        key = self.settings.pickle_hmac_key
        self.codec: Codec = codec or JSONCodec()
        # What a worker of this app may unpickle: the app's own signed codec, or one
        # made from the settings' key; JSON payloads need nothing.
        self.pickle_codec: SignedPickleCodec | None = None
        if isinstance(codec, SignedPickleCodec):
            self.pickle_codec = codec
        elif key:
            self.pickle_codec = SignedPickleCodec(key)
        self._lock = threading.Lock()
        self.one_shot = False
        """Set before the engine is opened by a command that runs once (the command line's):
        a store that cannot be reached then fails it within seconds, where a worker or a
        publisher retries through a restart (`open_engine`'s `one_shot`)."""
        self.instruments: tuple[instruments.Instrument, ...] = ()
        """What sees this app's publishes and its workers' runs (`instrument`)."""

    def __repr__(self) -> str:
        return f"App(broker={shown_url(self.settings.broker)!r})"

    @property
    def engine(self) -> Engine:
        """The engine, opened on first use."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = open_engine(self.settings.broker, one_shot=self.one_shot)
        return self._engine

    @property
    def max_data_bytes(self) -> int:
        """The largest job data the engine accepts (eager mode opens none: 10 MiB)."""
        if self.eager and self._engine is None:
            return EAGER_MAX_DATA_BYTES
        return self.engine.max_data_bytes

    def use_broker(self, broker: str) -> None:
        """Point this app at the store `broker` from now on, as `--broker` (or
        LANNER_BROKER) does on the command line. The app stays the same object, so its
        tasks, which publish through it, and a worker's `served_queues()` follow it; an
        engine it had open is closed."""
        with self._lock:
            self.settings = replace(self.settings, broker=broker)
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def reopen_engine(self, *, max_wait: float) -> Engine:
        """A new engine on the app's store whose opening and commands give up after about
        `max_wait` seconds (`EngineUnavailable`): for code that must never block on the
        store, such as a pool's supervisor. The app's own engine is not opened for it."""
        if self._engine is not None:
            return self._engine.reopen(max_wait=max_wait)
        return open_engine(self.settings.broker, max_wait=max_wait)

    @property
    def queues(self) -> tuple[QueueConfig, ...]:
        if self._queues is None:
            self._queues = self.settings.queues()
        return self._queues

    def served_queues(self) -> tuple[QueueConfig, ...]:
        """What a worker of this app serves unless told: the configured queues, then the
        queues of the tasks defined so far that publish through this app (with defaults)."""
        configured = self.queues
        names = {queue.name for queue in configured}
        extra = []
        for task in registered_tasks().values():
            name = task.queue or DEFAULT_QUEUE
            if name not in names and app_of(task) is self:
                names.add(name)
                extra.append(QueueConfig(name))
        return (*configured, *extra)

    def queue_config(self, name: str) -> QueueConfig | None:
        if self._queues_by_name is None:
            self._queues_by_name = {queue.name: queue for queue in self.queues}
        return self._queues_by_name.get(name)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()

    def instrument(self, instrument: instruments.Instrument) -> None:
        """Let `instrument` see this app's publishes and the runs of its workers
        (`lanner.instruments`); one of the same class already there is replaced."""
        kept = tuple(i for i in self.instruments if type(i) is not type(instrument))
        self.instruments = (*kept, instrument)

    # -- tasks ----------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> TaskFunction[P, R]: ...

    @overload
    def task(
        self, fn: None = None, /, **options: Unpack[TaskArguments]
    ) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...

    def task(self, fn: Callable[P, R] | None = None, /, **options: Unpack[TaskArguments]) -> Any:
        """Decorate a function (or an `async def` one) as a task, with or without arguments.

        `queue` (default "default"). `max_retries`: retries after the first failure, with
        exponential backoff (the settings' `retry_delay`; default 4); None or 0: none.
        `time_limit`: seconds a run may take (None, the default: no limit; its lock is
        kept by heartbeats as long as it runs). `target_runtime`: seconds past which a
        run is logged as slow (None: its time limit). `priority` (default 0). `name`
        (default: its dotted name). `result`: whether its jobs keep what it returns
        (None: the app's `results`). `rate_limit`, `rate_key`, `concurrency_key`,
        `max_concurrency`, `fair_key`, `debounce`: FLOW, held by the store across all
        workers (docs/flow-control.md). The names and defaults are
        `lanner.taskfunction.TaskOptions`'s; docs/tasks.md has the table of defaults."""
        chosen = TaskOptions.of(options)

        def decorate(function: Callable[P, R]) -> TaskFunction[P, R]:
            return TaskFunction(self, function, task_class_for(self, function, chosen))

        return decorate(fn) if fn is not None else decorate

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        catch_up: CatchUp = "once",
        name: str | None = None,
    ) -> Callable[[_T], _T]:
        """Run the task below (`@app.task`, or a Task class) on a schedule, fired by the
        store: `cron` (a cron expression in time zone `tz`; the `cron` extra) or `every`
        (a timedelta or seconds). `args`/`kwargs` are its runs' arguments; `catch_up` what
        runs of the ticks missed while no pool ran: "once" (default), "all" or "skip".
        The pool registers it at start; `name` (default: the task's) identifies it.
        docs/flow-control.md."""
        return periodic_decorator(self, cron, every, tz, args, kwargs, catch_up, name)

    # -- publishing -----------------------------------------------------------------------
    def publish(
        self,
        task: type[Task] | str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        app_data: Any = None,
        within: sqlite3.Connection | None = None,
        **options: Unpack[PublishArguments],
    ) -> JobHandle:
        """Publish one run of `task`; return its handle (the jid, a str). `options`:
        `lanner.prepared.PublishArguments` (queue, delay, priority, tags, depends, jid,
        retries, unique). `within`: as `publish_many`'s.

        With a `jid` of your own, publishing it again moves that job (new arguments, new
        place) while it waits, but never starts a second run of it while it runs
        (`InvalidState`); with `unique=True` a live job of that jid is left as it is, and
        its handle returned.
        """
        chosen = PublishOptions(**options)
        message = Message(_task_class(task), tuple(args), kwargs or {}, app_data, chosen)
        return self.publish_many([message], within=within)[0]

    def publish_many(
        self, messages: Iterable[Message], *, within: sqlite3.Connection | None = None
    ) -> list[JobHandle]:
        """Publish many runs in one engine round trip (all or none); return their handles.

        `within`: the application's own `sqlite3` connection, whose open transaction the
        jobs join: they exist once it commits, never if it rolls back. On the SQLite
        engine that connection must be open on the broker's file (lanner's tables in the
        application's database); on Redis or SQS the jobs are written to the outbox of
        that connection's database, which `lanner worker --outbox` relays after the
        commit (docs/integrations.md)."""
        if self.instruments:
            messages = list(messages)
            with instruments.publishing(self, messages):
                return self._publish_many(messages, instruments.headers(self), within)
        return self._publish_many(messages, None, within)

    def _publish_many(
        self,
        messages: Iterable[Message],
        headers: Mapping[str, str] | None,
        within: sqlite3.Connection | None,
    ) -> list[JobHandle]:
        prepared = [(message, self._new_job(message, headers)) for message in messages]
        if self.eager:
            from lanner.inprocess.eager import run_eagerly

            return [run_eagerly(self, job) for _, job in prepared]
        jobs = [job for _, job in prepared]
        try:
            jids = self.engine.put_many(jobs) if within is None else self._put_within(within, jobs)
        except PayloadTooLarge as error:
            raise ChubbyTaskException(str(error)) from None
        except InvalidState:
            # A debounced key's other turn is put outside any caller's transaction: refused.
            if within is not None or not any(job.jid.startswith("debounce-") for job in jobs):
                raise
            jids = [self._put_debounced(job) for job in jobs]  # one at a time, then
        return [JobHandle(jid, self) for jid in jids]

    def _put_within(self, conn: sqlite3.Connection, jobs: list[NewJob]) -> list[str]:
        from lanner.engines.sqlite import SQLiteEngine

        engine = self.engine
        if isinstance(engine, SQLiteEngine):
            return engine.put_within(conn, jobs)
        from lanner import checks
        from lanner.outbox import sqlite as outbox

        checked = checks.put_many(jobs, None, engine.max_data_bytes)  # refused now, not later
        outbox.write(conn, checked.jobs)
        return [job.jid for job in checked.jobs]

    def _put_debounced(self, job: NewJob) -> str:
        """Put a job; one of a debounce key whose run is running goes to its other jid (a
        key's two jids take turns, and its runs never overlap: its concurrency key)."""
        try:
            return self.engine.put_many([job])[0]
        except InvalidState:
            if not job.jid.startswith("debounce-"):
                raise
            return self.engine.put_many([job._replace(jid=other_turn(job.jid))])[0]

    async def apublish_many(self, messages: Iterable[Message]) -> list[JobHandle]:
        """`publish_many()` for async code: the engine's round trip (or an eager run) is
        made in a thread, so the event loop goes on meanwhile (`lanner.offload`)."""
        from lanner import offload

        return await offload.call(self.publish_many, list(messages))

    def handle(self, jid: str) -> JobHandle:
        """The handle of a job published earlier (by this process or another)."""
        return JobHandle(names.label(jid, "jid"), self)

    def _new_job(
        self,
        message: Message,
        headers: Mapping[str, str] | None = None,
        workflow: Mapping[str, Any] | None = None,
    ) -> NewJob:
        """The job of `message`; `headers`: what integrations carry (`lanner.instruments`);
        `workflow`: its envelope's "wf" (`lanner.workflows.plan`)."""
        task, options = message.task, message.options
        queue = options.queue or task.queue or DEFAULT_QUEUE
        self._check_time_limit(task, queue)
        chosen = options.jid is not None or task._get_task_id.__func__ is not _random_id  # type: ignore[attr-defined]
        jid = options.jid or task._get_task_id(*message.args, **message.kwargs)
        codec = self.codec
        if type(codec) is JSONCodec:  # the default: no Payload or JobIdentity made per job
            parts = message.args, message.kwargs, message.app_data, headers, workflow
            data: str = encode_json(*parts, (jid, task.name, queue))
        else:
            payload = Payload(message.args, message.kwargs, message.app_data, headers, workflow)
            data = codec.encode(payload, JobIdentity(jid, task.name, queue))
        limit = self.max_data_bytes
        if len(data) > limit:
            raise ChubbyTaskException(
                f"{task.name} {jid}: payload is {len(data)} bytes; the engine accepts at most "
                f"{limit}"
            )
        config = self.queue_config(queue)
        retries = options.retries
        if retries is None:
            retries = task.max_retries if task.max_retries is not None else 0
            # A queue's `retries` is the default of tasks that do not set max_retries.
            inherited = "max_retries" not in vars(task)
            if config is not None and config.retries is not None and inherited:
                retries = config.retries
        rate_limit = config.rate_limit if config is not None else None
        # Positional (NewJob's field order): keywords cost a NamedTuple more per job.
        new = NewJob(
            queue,
            jid,
            task.name,
            data,
            options.delay,
            options.priority if options.priority is not None else task.priority,
            options.tags,
            retries,
            options.depends,
            # A workflow's jids are new (lanner.workflows.plan): nothing to keep or refuse.
            self._if_exists(chosen and workflow is None, options.unique),
            None,  # expires_at
            flow_of(task, options.flow, queue, rate_limit, message.args, message.kwargs),
        )
        debounce = options.debounce or getattr(task, "debounce", None)
        if (new.flow is not None or debounce is not None) and not self.eager:
            refuse_unheld(self.engine, task.name, queue, new.flow, debounce)  # named, now
        if debounce is None:
            return new
        return debounced(new, task, debounce, message.args, message.kwargs)

    def _if_exists(self, chosen_jid: bool, unique: bool) -> str:
        """A jid chosen by the publisher may be live: keep it (unique), or move it unless it
        runs (where the engine can say so atomically). A random one is new."""
        if unique:
            return "keep"
        if chosen_jid and not self.eager and Capability.UNIQUE in self.engine.capabilities:
            return "move-unless-running"
        return "move"

    def _check_time_limit(self, task: type[Task], queue: str) -> None:
        config = self.queue_config(queue)
        limit = task.time_limit
        if config is not None and limit is not None and limit >= config.visibility_timeout_sec:
            raise InvalidTimeLimitTaskException(
                f"{task.name}: time_limit {limit} s must be shorter than queue "
                f"{queue!r}'s visibility_timeout_sec {config.visibility_timeout_sec} s"
            )


def _task_class(task: type[Task] | str) -> type[Task]:
    if isinstance(task, str):
        found = find_task(task)
        if found is None:
            raise MalformedArgument(f"unknown task {task!r}: no Task subclass has that name")
        return found
    return task


_default_app: App | None = None
_default_lock = threading.Lock()


def app_of(task: type[Task]) -> App | None:
    """The App `task` publishes through: its `app`, else the App its module names `app`,
    else the default app (None if none was set or built yet)."""
    if task.app is not None:
        return task.app
    module_app = getattr(sys.modules.get(task.__module__), "app", None)
    return module_app if isinstance(module_app, App) else _default_app


def default_app() -> App:
    """The process's default App, built once from configuration (see module docstring)."""
    global _default_app
    if _default_app is None:
        with _default_lock:
            if _default_app is None:
                app = App()
                # Publishing to ./lanner.db because nothing was configured deserves a warning.
                configured = configured_from_environment()
                unset = "" if configured else " (neither LANNER_BROKER nor a settings module set)"
                log = logger.info if configured else logger.warning
                where = shown_url(app.settings.broker)
                log("lanner: the default app publishes to %s%s", where, unset)
                _default_app = app
    return _default_app


def set_default_app(app: App | None) -> None:
    """Choose the app that Kale-style tasks without an `app` publish through."""
    global _default_app
    _default_app = app

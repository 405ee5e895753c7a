"""The loop of a worker process that runs up to `tasks_per_process` jobs at once.

    on the process's event loop (its main thread):
        feeder    while a slot is free: select a queue, pop at most the free slots, and
                  start each job as an asyncio task of its own
        each job  admitted, then run under its own time limit: an `async def` task is
                  awaited on this loop; a sync one runs in one of `threads` threads
        keeper    every third of the shortest lock: one `heartbeat_many` for every job
                  held; every CHECK_EVERY_SEC: one `multiget` of the jobs running that
                  long, so a job cancelled or handed on is stopped alone
        settler   every COMPLETE_WITHIN_SEC: completes what ran, one call per queue
                  (keeper and settler: inflight.py, with `InFlight`, a job held)

No engine call runs on the event loop: pops (which may block in a long poll) run in one
thread, every other call in another, so a long poll never delays a heartbeat or a
completion, and a slow store never stalls the tasks.

A job is stopped alone: an async task is cancelled where it awaits and sees its error
(`TimeLimitExceeded`, `JobCancelled`); a sync task in a thread gets the error raised in
that thread at its next Python instruction (a task blocked in C code is not interrupted:
the supervisor kills its process after the grace, charging that job alone). A job that
was in flight when its process died runs alone afterwards (`recovery.runs_alone`): only a death
with no other job in flight is charged to it (recovery.py), so a poison job still ends
failed and its innocent neighbours never do.

Sync tasks are not made to share a process's threads unless the worker asks (`threads`):
code written for one task at a time may not be thread-safe. A popped sync job waits at
most BATCH_HOLD_SEC for a thread before it is given back for another process, and a
queue seen to hold sync jobs is popped at most as many as threads are free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from lanner import context, instruments, progress
from lanner.errors import (
    LannerError,
    StoreMisconfigured,
    TaskFailed,
    TimeLimitExceeded,
)
from lanner.eventloops import new_event_loop
from lanner.instruments import Run
from lanner.job import Job
from lanner.queues import QueueConfig
from lanner.selectors import QueueSelector
from lanner.task import Task
from lanner.worker import interrupt, rates
from lanner.worker.admission import Rejected, admit
from lanner.worker.inflight import InFlight, KeepingInFlight, NoThread
from lanner.worker.loop import (
    BATCH_HOLD_SEC,
    Limits,
    configure_worker_queues,
)
from lanner.worker.outage import Outage
from lanner.worker.recovery import runs_alone
from lanner.worker.reporter import Outcome, Reporter
from lanner.worker.running import Ended, start_window

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.worker")

MAX_POP: Final = 100
"""The most jobs one pop takes, however many slots are free."""

SLOT_WAIT_SEC: Final = 0.5
"""How long the feeder waits for a free slot before it looks at its limits again."""


class ConcurrentLoop(KeepingInFlight):
    """A `WorkerLoop` that runs up to `tasks_per_process` jobs at once (sync ones in up to
    `threads` threads); the queue selection, admission and failure policy are the same."""

    def __init__(
        self,
        app: App,
        queues: Sequence[QueueConfig],
        selector: QueueSelector,
        *,
        tasks_per_process: int,
        threads: int = 1,
        worker: str | None = None,
        reporter: Reporter | None = None,
        limits: Limits | None = None,
        configure: bool = True,
        supervisor: int | None = None,
    ) -> None:
        super().__init__(
            app, queues, selector, worker=worker, reporter=reporter, limits=limits,
            configure=configure, supervisor=supervisor,
        )  # fmt: skip
        self.slots = tasks_per_process
        self.threads = min(threads, tasks_per_process)
        self._held: dict[str, InFlight] = {}  # every job popped and not settled, by jid
        self._done: dict[str, tuple[list[str], dict[str, str]]] = {}  # ran, by queue
        self._sync_queues: set[str] = set()  # queues whose jobs were seen to be sync
        self._sync_free = self.threads
        self._alone: InFlight | None = None  # a job that runs with no other beside it
        self._waiting_alone: set[InFlight] = set()  # jobs waiting to run alone
        self._unflushed = False  # a batch was reported that is not all settled yet
        self._popping: asyncio.Future[tuple[QueueConfig, list[Job] | None]] | None = None
        self._pop_thread = concurrent.futures.ThreadPoolExecutor(1, "lanner-pop")
        self._engine_thread = concurrent.futures.ThreadPoolExecutor(1, "lanner-engine")
        self._task_threads = concurrent.futures.ThreadPoolExecutor(self.threads, "lanner-task")
        self._sync_gate: asyncio.Semaphore | None = None

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> str:
        """Run until stopped or a limit is reached; return why ('stopped', 'max-tasks', ...)."""
        loop = new_event_loop()
        # A task that forks leaves a copy of this loop in the child: it must run no other
        # job there, nor act as the worker. The copy's loop stops after its current turn,
        # and any of its paths back to the worker's code leaves at once (_exit_if_forked).
        os.register_at_fork(after_in_child=functools.partial(_stop_if_running, weakref.ref(loop)))
        try:
            return loop.run_until_complete(self._run())
        except RuntimeError:
            self._exit_if_forked()  # "Event loop stopped before Future completed", in a copy
            raise
        finally:
            loop.close()
            for pool in (self._pop_thread, self._engine_thread, self._task_threads):
                pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> str:
        self._changed = asyncio.Event()  # set (and replaced) each time a job ends here
        self._sync_gate = asyncio.Semaphore(self.threads)
        # The store's threads start now, before any task runs: a task may leave the process
        # unable to start a thread (an address-space limit it lowered), and completions
        # must not depend on starting one then.
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(pool, int)
                               for pool in (self._pop_thread, self._engine_thread)))  # fmt: skip
        outage = Outage(self.app.settings.broker, self.outage_first_pause)
        chores = [
            asyncio.create_task(self._keep_leases()),
            asyncio.create_task(self._settle_often()),
        ]
        reason: str | None = None
        try:
            while not self._stopping and reason is None:
                try:
                    if not self._configured:
                        await self._call(self._configure)
                    if self._undone:
                        await self._call(self.complete_done)
                    reason = await self._feed()
                except StoreMisconfigured:
                    raise  # waiting cannot fix it: the pool stops
                except LannerError as error:
                    outage.failed(error)
                    self.reporter.engine_error()
                    await self._pause(outage.backoff.pause)
                    outage.backoff.grow()
                    continue
                outage.ended()
            await self._give_back_popping()
            await self._finish_in_flight()
        finally:
            for chore in chores:
                chore.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
        try:
            await self._complete_all()
        except LannerError as error:
            logger.warning("finished jobs not completed (%s): they will run again", error)
        return reason or "stopped"

    def _configure(self) -> None:
        configure_worker_queues(self.engine, self.queues)
        self._configured = True

    async def _feed(self) -> str | None:
        """Fill the free slots from one queue; the name of a limit reached, if one is.

        The next pop is sent to the pop thread before the jobs just popped start, so that
        the store works on it while the event loop starts them."""
        free = self.slots - len(self._held)
        if self._alone is not None or self._waiting_alone:
            await self._give_back_popping()  # no job starts beside one that runs alone
            await self._wait_for_change(SLOT_WAIT_SEC)
            return self.limit_reached()
        if free <= 0:
            await self._wait_for_change(SLOT_WAIT_SEC)
            return self.limit_reached()
        popping, self._popping = self._popping or self._pop_soon(free), None
        queue, jobs = await popping
        self._exit_if_forked()
        if jobs is None:  # a queue of sync jobs while every thread is busy
            await self._wait_for_change(SLOT_WAIT_SEC)
            return self.limit_reached()
        if not jobs:
            self._ready = (0.0, frozenset())  # stale: ask the engine next time
            return self.limit_reached()
        self.reporter.batch(queue.name, [job.jid for job in jobs])
        self._unflushed = True
        flights = [InFlight(job, queue) for job in jobs]
        self._held.update((flight.job.jid, flight) for flight in flights)
        free = self.slots - len(self._held)
        if free > 0 and not self._stopping and self.limit_reached() is None:
            self._popping = self._pop_soon(free)
        for flight in flights:
            flight.task = asyncio.create_task(self._run_job(flight))
        return self.limit_reached()

    def _pop_soon(self, free: int) -> asyncio.Future[tuple[QueueConfig, list[Job] | None]]:
        """Choose a queue and pop at most `free` jobs, in the pop thread, from now."""
        return asyncio.get_running_loop().run_in_executor(self._pop_thread, self._pop_some, free)

    def _pop_some(self, free: int) -> tuple[QueueConfig, list[Job] | None]:
        """The pop thread's part of `_feed`: the jobs of the queue chosen (None: it holds
        sync jobs and no thread is free). A long poll only on a queue that had no work."""
        queue = self.select()
        count = min(free, MAX_POP)
        if queue.name in self._sync_queues:
            count = min(count, self._sync_free)
            if count <= 0:
                return queue, None
        return queue, self._pop(queue, queue.name not in self.ready_queues(), count)

    async def _give_back_popping(self) -> None:
        """A pop sent that will not be started (the loop stops, or a job runs alone): what
        it took goes back to its queue."""
        popping, self._popping = self._popping, None
        if popping is None:
            return
        with contextlib.suppress(LannerError):
            queue, jobs = await popping
            if jobs:
                await self._call(self._release, [job.jid for job in jobs], queue.name,
                                 "not started here")  # fmt: skip

    async def _wait_for_change(self, timeout: float) -> None:
        """Until a job ends here (every waiter wakes), or `timeout`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not (self._stopping or self._orphaned()) and time.monotonic() < deadline:
            await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    async def _finish_in_flight(self) -> None:
        """A stopping process finishes what runs (the supervisor kills it past its
        shutdown timeout); a job still waiting for a thread is given back."""
        while self._held:
            await self._wait_for_change(SLOT_WAIT_SEC)

    # -- one job --------------------------------------------------------------------------
    async def _run_job(self, flight: InFlight) -> None:
        job = flight.job
        context.running_job(job, self.engine)  # in this asyncio task's context: never reset
        try:
            await self._run_admitted(flight)
        except LannerError as error:  # the store failed settling it: it comes back by its lock
            logger.warning("job %s not settled: %s", job.jid, error)
        finally:
            self._ended(flight)

    async def _run_admitted(self, flight: InFlight) -> None:
        job = flight.job
        try:
            task_class, payload, args, kwargs = admit(job, self.engine.max_data_bytes, self.app)
        except Rejected as rejected:
            logger.error("job %s (%s) cannot run: %s", job.jid, job.klass, rejected.message)
            await self._call(self._fail, job, rejected.group, rejected.message)
            self.reporter.finished(job.jid, False, "failed", job.klass)
            if self._on_error is not None:
                self._on_error(job, TaskFailed(job.jid, rejected.group, rejected.message))
            return
        sync = not task_class.runs_async()
        if sync:
            self._sync_queues.add(job.queue)
        if runs_alone(job) and not await self._be_alone(flight):
            return
        if sync and not await self._take_thread(flight):
            return
        try:
            if not self.app.instruments:
                await self._run_task(flight, task_class, payload, args, kwargs, sync)
                return
            with instruments.running(self.app, Run(job, task_class, payload.headers or {})) as run:
                ended = await self._run_task(flight, task_class, payload, args, kwargs, sync)
                run.outcome, run.error = ended
        finally:
            if sync:
                self._give_thread()
            if self._alone is flight:
                self._alone = None

    async def _be_alone(self, flight: InFlight) -> bool:
        """Wait until every other job here has ended (or waits to run alone too), then run
        with none beside it; False if the process stops first (the job is given back)."""
        self._waiting_alone.add(flight)
        try:
            while self._alone is not None or any(
                other not in self._waiting_alone for other in self._held.values()
            ):
                if self._stopping:
                    await self._call(self._release, [flight.job.jid], flight.job.queue,
                                     "worker stopping")  # fmt: skip
                    return False
                await self._wait_for_change(SLOT_WAIT_SEC)
        finally:
            self._waiting_alone.discard(flight)
        self._alone = flight
        logger.info("job %s runs alone: it was in flight when a process died", flight.job.jid)
        return True

    async def _take_thread(self, flight: InFlight) -> bool:
        """A thread for a sync task, or False: the job was given back (held too long)."""
        assert self._sync_gate is not None
        try:
            await asyncio.wait_for(self._sync_gate.acquire(), BATCH_HOLD_SEC)
        except TimeoutError:
            why = f"held {BATCH_HOLD_SEC:g} s: for a process that can start it now"
            await self._call(self._release, [flight.job.jid], flight.job.queue, why)
            return False
        self._sync_free -= 1
        if self._stopping:
            self._give_thread()
            await self._call(self._release, [flight.job.jid], flight.job.queue,
                             "worker stopping")  # fmt: skip
            return False
        return True

    def _give_thread(self) -> None:
        assert self._sync_gate is not None
        self._sync_free += 1
        self._sync_gate.release()

    async def _run_task(
        self,
        flight: InFlight,
        task_class: type[Task],
        payload: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sync: bool,
    ) -> Ended:
        job = flight.job
        task: Task | None = None
        started = time.monotonic()
        try:
            task = task_class(job, payload)
            if not task.should_run_task(*args, **kwargs):
                deferrals = sum(1 for event in job.history if event.what == "released")
                delay = self.app.settings.retry_delay(deferrals)
                await self._call(self._release, [job.jid], job.queue, "should_run_task() said no",
                                 delay)  # fmt: skip
                return "", None
            window = start_window(job)
            if window is not None and not await rates.ahold(window):
                await self._call(self._release, [job.jid], job.queue, rates.LATE)
                return "", None
            limit = task.time_limit or 0.0
            deadline = time.time() + limit if limit > 0 else float("inf")
            self.reporter.started(job.jid, deadline, self._retry_delay(job))
            loop = asyncio.get_running_loop()
            timer = loop.call_later(
                limit, flight.stop, TimeLimitExceeded(f"time limit of {limit:g} s exceeded")
            ) if limit > 0 else None  # fmt: skip
            if flight.error is not None:  # stopped before it started
                raise flight.error
            try:
                if sync:
                    value = await self._in_thread(flight, task.run, args, kwargs)
                else:
                    value = await self._awaited(flight, task.arun(*args, **kwargs))
            finally:
                if timer is not None:
                    timer.cancel()
                if progress.reported(self.engine, job.jid):  # before the job settles
                    await self._call(progress.finish, self.engine, job.jid)
            result = self._result(task, value)
        except NoThread as error:
            # Not the job's fault: it goes back unspent, as when no thread was free in time,
            # so that a neighbour's limits never charge an innocent job.
            why = f"no thread could start for it ({error})"
            await self._call(self._release, [job.jid], job.queue, why)
            self.reporter.finished(job.jid, False, "", job.klass)
            return "", None
        except (Exception, SystemExit, KeyboardInterrupt) as error:  # the task's, all of them
            outcome: Outcome = await self._call(self._after_failure, task_class, task, job, error)
            self.processed += 1
            self.reporter.finished(job.jid, False, outcome, job.klass, time.monotonic() - started)
            return outcome, error
        self.processed += 1
        self._learn(job.queue, time.monotonic() - started)
        jids, results = self._done.setdefault(job.queue, ([], {}))
        jids.append(job.jid)
        if result is not None:
            results[job.jid] = result
        self.reporter.finished(job.jid, True, "completed", job.klass, time.monotonic() - started)
        return "completed", None

    async def _awaited(self, flight: InFlight, running: Any) -> Any:
        """Await an async task's coroutine; a stop cancels it where it awaits, and the
        error that stopped it is raised in place of the cancellation."""
        flight.running = "async"
        try:
            return await running
        except asyncio.CancelledError:
            if flight.error is None:
                raise  # the loop itself is going away
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            raise flight.error from None
        finally:
            self._exit_if_forked()  # a copy the task forked, back from it

    async def _in_thread(
        self,
        flight: InFlight,
        run: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run a sync task in a task thread, with the job as its current job."""
        copied = contextvars.copy_context()
        flight.running = "thread"

        def body() -> Any:
            ident = threading.get_ident()
            with flight.lock:
                flight.thread = ident
            try:
                if flight.error is not None:
                    raise flight.error
                return copied.run(run, *args, **kwargs)
            except BaseException as error:
                # What `stop` raised in this thread is a bare class: raise the error that
                # says why in its place.
                if flight.error is not None and type(error) is type(flight.error):
                    raise flight.error from None
                raise
            finally:
                with flight.lock:
                    flight.thread = None
                interrupt.forget_in_thread(ident)  # a stop that came too late
                self._exit_if_forked()  # a copy the task forked, back from it

        ran: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run_body() -> None:
            if not ran.set_running_or_notify_cancel():
                return  # given back before a thread took it
            try:
                ran.set_result(body())
            except BaseException as error:
                ran.set_exception(error)

        try:
            self._task_threads.submit(run_body)
        except RuntimeError as error:
            # No thread could start ("can't start new thread": a neighbour lowered the
            # process's limits). The body stays queued in the executor; cancelled here, it
            # never runs (unless a thread took it meanwhile: then it runs, and is awaited).
            if ran.cancel():
                raise NoThread(str(error)) from error
        return await asyncio.wrap_future(ran)

    def _ended(self, flight: InFlight) -> None:
        self._held.pop(flight.job.jid, None)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def _stop_if_running(loop: weakref.ref[asyncio.AbstractEventLoop]) -> None:
    running = loop()
    if running is not None and running.is_running():
        running.stop()

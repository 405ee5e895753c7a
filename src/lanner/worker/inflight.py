"""What a process that runs many jobs at once holds, and the store's side of it.

`InFlight` is one job held, from its pop to its settling (how to stop it, where it runs).
`KeepingInFlight`, a part of `ConcurrentLoop`, keeps them with the store: every engine
call runs in one engine thread, never on the event loop (`_call`); every third of the
shortest lock one `heartbeat_many` extends every job held (a job whose lock was lost is
stopped alone); every CHECK_EVERY_SEC one `multiget` looks at the jobs running that long
(a job cancelled, or handed on, is stopped alone); every COMPLETE_WITHIN_SEC what ran is
completed, one call per queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from lanner.engine import Capability
from lanner.errors import JobCancelled, LannerError
from lanner.job import Job, JobState
from lanner.queues import QueueConfig
from lanner.worker import interrupt
from lanner.worker.keeper import CHECK_EVERY_SEC
from lanner.worker.loop import COMPLETE_WITHIN_SEC, WorkerLoop

logger = logging.getLogger("lanner.worker")

T = TypeVar("T")


class NoThread(RuntimeError):
    """A sync task's thread could not be started: its job is given back, not charged."""


@dataclass(eq=False)
class InFlight:
    """A job this process holds, from its pop to its settling."""

    job: Job
    queue: QueueConfig
    started: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None  # the asyncio task that settles it
    running: str = ""  # "async": its coroutine is awaited; "thread": its sync task runs
    thread: int | None = None  # the thread running its sync task, while it runs
    error: BaseException | None = None  # what stopped it (time limit, cancel)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, error: BaseException) -> bool:
        """Raise `error` in its task now (before it starts, if it has not: then it never
        does); False if it was stopped already or has ended."""
        with self.lock:
            if self.error is not None or self.task is None or self.task.done():
                return False
            self.error = error
            if self.running == "async":
                self.task.cancel()
            elif self.thread is not None:
                interrupt.raise_in_thread(self.thread, type(error))
            return True


class KeepingInFlight(WorkerLoop):
    """The store's side of `ConcurrentLoop`: engine calls, heartbeats, checks, settling."""

    if TYPE_CHECKING:
        _held: dict[str, InFlight]  # every job popped and not settled, by jid
        _done: dict[str, tuple[list[str], dict[str, str]]]  # ran, by queue
        _unflushed: bool
        _engine_thread: concurrent.futures.ThreadPoolExecutor

    async def _call(self, action: Callable[..., T], *args: Any) -> T:
        """Run an engine call (or a chore made of them: a failure settled through the
        task's hooks) in the engine thread, in this job's context (`current_job()`)."""
        context_now = contextvars.copy_context()
        self._exit_if_forked()  # a copy of this loop never touches the store
        return await asyncio.get_running_loop().run_in_executor(
            self._engine_thread, context_now.run, action, *args
        )

    async def _settle_often(self) -> None:
        while True:
            await asyncio.sleep(COMPLETE_WITHIN_SEC)
            try:
                await self._complete_all()
            except LannerError:
                pass  # kept in _undone: _run waits the store out
            except Exception:  # never the end of completions
                logger.exception("completing finished jobs")

    async def _complete_all(self) -> None:
        done, self._done = self._done, {}
        while done:
            queue = next(iter(done))
            try:
                await self._call(self._settle, queue, *done[queue])
                del done[queue]
            except BaseException as error:
                # What was not tried (and this call too, unless the store refused it and
                # _settle kept it) waits for the next try.
                if isinstance(error, LannerError):
                    del done[queue]
                for queue, (jids, results) in done.items():
                    kept, kept_results = self._done.setdefault(queue, ([], {}))
                    kept[:0] = jids
                    kept_results.update(results)
                raise
        if self._unflushed and not (self._held or self._done or self._undone):
            self._unflushed = False
            self.reporter.flushed()

    async def _keep_leases(self) -> None:
        """Heartbeat every held job in one call, and stop the ones no longer ours."""
        lock = min(queue.visibility_timeout_sec for queue in self.queues)
        beat_every, last_beat = lock / 3, time.monotonic()
        while True:
            await asyncio.sleep(min(lock / 9, CHECK_EVERY_SEC))
            if not self._held:
                last_beat = time.monotonic()
                continue
            try:
                if time.monotonic() - last_beat >= beat_every:
                    last_beat = time.monotonic()
                    await self._beat()
                else:
                    await self._look()
            except LannerError as error:
                logger.warning("keeping %d job(s): %s", len(self._held), error)
            except Exception:  # never the end of heartbeats
                logger.exception("keeping %d job(s)", len(self._held))

    async def _beat(self) -> None:
        jids = list(self._held)
        extended = await self._call(self.engine.heartbeat_many, jids, self.worker)
        for jid in jids:
            if jid not in extended:
                self._stop(jid, "its lock was lost")

    async def _look(self) -> None:
        """Every CHECK_EVERY_SEC, the jobs that have run that long: cancelled, or not ours?"""
        if Capability.LOOKUP not in self.engine.capabilities:
            return
        now = time.monotonic()
        jids = [jid for jid, f in self._held.items() if now - f.started >= CHECK_EVERY_SEC]
        if not jids:
            return
        found = {job.jid: job for job in await self._call(self.engine.multiget, jids)}
        for jid in jids:
            job = found.get(jid)
            if job is None:
                self._stop(jid, "it was cancelled")
            elif job.state != JobState.RUNNING or job.worker != self.worker:
                holder = f" by {job.worker}" if job.worker else ""
                self._stop(jid, f"its lock was lost: it is {job.state}{holder}")

    def _stop(self, jid: str, why: str) -> None:
        flight = self._held.get(jid)
        if flight is not None and flight.stop(JobCancelled(f"job {jid}: {why}")):
            logger.warning("job %s: %s; its task is stopped", jid, why)
            self.reporter.stopping(jid, why)

"""The engine as the Kestrel server uses it: batched puts, pops and completions, blocked
readers served in arrival order, and open items kept locked while their readers hold them.

Every item handed out is a job locked by the server's one worker name, so that if the
server dies its items come back when their locks run out (reliable fetch across a crash).
An item is completed only after its reply was written (a plain get) or closed (an open
get); an item that nobody can take any more (its reader timed out or went away while the
engine was handing it over) is released at once: back at the head of its queue, no retry
spent, for the next reader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, NamedTuple, TypeVar

from lanner.engine import Capability, Engine
from lanner.errors import LannerError, PayloadTooLarge, QueueFull, Unsupported
from lanner.job import Job
from lanner.kestrel.batcher import Batcher
from lanner.kestrel.items import ITEM_KLASS, JidMaker, to_data
from lanner.records import NewJob

logger = logging.getLogger("lanner.kestrel")
R = TypeVar("R")

MAX_WAIT: Final = 1.0
"""The longest one blocked pop lasts: then the readers still waiting are counted again (and
a stopping server waits no longer than this for the pops under way)."""

REFUSALS: Final = (QueueFull, PayloadTooLarge, Unsupported)
"""What refuses one item of a batch of puts, not the batch."""


HEARTBEAT_CHECK: Final = 0.25
"""How often the locks of open items are looked at (each is renewed at half its lease)."""


class OpenItem(NamedTuple):
    queue: str
    expires: float  # when its lock runs out
    lease: float  # the length of its lock


@dataclass(eq=False)
class Reader:
    """One queue's readers: a batcher for immediate pops and completions, and the blocked."""

    queue: str
    pops: Batcher[None, Job | None]
    completions: Batcher[str, None]
    blocked: deque[tuple[asyncio.Future[Job | None], float]] = field(default_factory=deque)
    waiting: asyncio.Task[None] | None = None
    last_read: Job | None = None  # the latest job handed out, for the `age` stat
    last_read_at: float = 0.0


def _settle(future: asyncio.Future[Job | None], job: Job | None) -> None:
    if not future.done():
        future.set_result(job)


class Front:
    """Puts, takes, completes and gives back items of any queue for the server."""

    def __init__(self, engine: Engine, worker: str) -> None:
        self.engine = engine
        self.worker = worker
        self._executor = ThreadPoolExecutor(8, thread_name_prefix="lanner-kestrel")
        # Blocked pops hold a thread for up to MAX_WAIT: they get threads of their own, so
        # that they never keep a put (which would wake them) waiting for a thread.
        self._blocking = ThreadPoolExecutor(256, thread_name_prefix="lanner-kestrel-wait")
        self._jids = JidMaker()
        self._puts: Batcher[NewJob, None] = Batcher(self._put_batch, self._executor)
        self._readers: dict[str, Reader] = {}
        self.open: dict[str, OpenItem] = {}  # every item held open by a reader, by jid
        self._giving_back: set[asyncio.Future[None]] = set()
        self._completing: set[asyncio.Future[None]] = set()

    # -- putting --------------------------------------------------------------------------
    def put(self, queue: str, value: bytes, expires_at: float | None) -> asyncio.Future[None]:
        """Store one item: the future is done once it is stored, or with the `LannerError`
        that refused it (QueueFull, PayloadTooLarge, ...). A future, not a coroutine: one
        frame less on every set, and the put goes on even if nobody awaits it."""
        job = NewJob(queue, self._jids(), ITEM_KLASS, to_data(value), expires_at=expires_at)
        return self._puts.enqueue(job)

    def _put_batch(self, jobs: list[NewJob]) -> Sequence[Exception | None]:
        try:
            self.engine.put_many(jobs)
            return [None] * len(jobs)
        except REFUSALS:
            if len(jobs) == 1:
                raise
        # put_many stores all or nothing: put one by one to refuse only the refused ones.
        results: list[Exception | None] = []
        for job in jobs:
            try:
                self.engine.put_many([job])
                results.append(None)
            except REFUSALS as error:
                results.append(error)
        return results

    # -- taking ---------------------------------------------------------------------------
    def reader(self, queue: str) -> Reader:
        found = self._readers.get(queue)
        if found is None:
            found = self._readers[queue] = Reader(
                queue,
                Batcher(
                    lambda batch: self._pop_batch(queue, len(batch)),
                    self._executor,
                    lambda _, job: self._give_back(queue, job),
                ),
                Batcher(lambda jids: self._complete_batch(queue, jids), self._executor),
            )
        return found

    async def take(self, queue: str, timeout: float) -> Job | None:
        """Lock the next item of `queue`, waiting up to `timeout` seconds for one to come.

        The caller owns the job it gets: it must complete or release it (`give_back`),
        even if it is cancelled right after this returns.
        """
        reader = self.reader(queue)
        job = await reader.pops.submit(None)
        if job is None and timeout > 0:
            job = await self._wait(reader, timeout)
        if job is not None:
            reader.last_read, reader.last_read_at = job, time.time()
        return job

    async def _wait(self, reader: Reader, timeout: float) -> Job | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Job | None] = loop.create_future()
        deadline = loop.time() + timeout
        reader.blocked.append((future, deadline))
        timer = loop.call_at(deadline, _settle, future, None)
        if reader.waiting is None:
            reader.waiting = loop.create_task(self._serve_blocked(reader))
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                job = future.result()
                if job is not None:
                    self._give_back(reader.queue, job)
            raise
        finally:
            timer.cancel()

    async def _serve_blocked(self, reader: Reader) -> None:
        """Blocked pops for the readers of one queue while any waits, items to the oldest."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                live = [(f, d) for f, d in reader.blocked if not f.done()]
                reader.blocked = deque(live)
                if not live:
                    return
                wait = min(MAX_WAIT, max(0.001, max(d for _, d in live) - loop.time()))
                try:
                    jobs = await loop.run_in_executor(
                        self._blocking, self._pop_blocking, reader.queue, len(live), wait
                    )
                except LannerError as error:
                    for future, _ in live:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for job in jobs:
                    self._hand_over(reader, job)
        finally:
            reader.waiting = None

    def _hand_over(self, reader: Reader, job: Job) -> None:
        while reader.blocked:
            future, _ = reader.blocked.popleft()
            if not future.done():
                future.set_result(job)
                return
        self._give_back(reader.queue, job)

    def _pop_batch(self, queue: str, count: int) -> list[Job | None]:
        jobs: list[Job | None] = list(self.engine.pop(queue, self.worker, count))
        return jobs + [None] * (count - len(jobs))

    def _pop_blocking(self, queue: str, count: int, wait: float) -> list[Job]:
        if Capability.BLOCKING_POP not in self.engine.capabilities:
            raise Unsupported(self.engine.name, "get with /t=", Capability.BLOCKING_POP.value)
        return self.engine.pop(queue, self.worker, count, wait=wait)

    # -- finishing ------------------------------------------------------------------------
    async def complete(self, queue: str, jid: str) -> None:
        """Done with an item: it is removed from its queue."""
        self.open.pop(jid, None)
        await self.reader(queue).completions.submit(jid)

    def complete_soon(self, queue: str, jid: str) -> None:
        """Complete an item whose reply is written, without keeping its reader waiting: the
        reader's next request goes on while the completion joins the next batch. `close`
        waits for it; if the server dies first, the item comes back when its lock runs out
        (at-least-once, as for any item handed out)."""
        self.open.pop(jid, None)
        completion = self.reader(queue).completions.enqueue(jid)  # no task: one less step
        self._completing.add(completion)
        completion.add_done_callback(self._completed)

    def _completed(self, completion: asyncio.Future[None]) -> None:
        self._completing.discard(completion)
        if not completion.cancelled() and (error := completion.exception()) is not None:
            logger.warning("could not complete an item read: %s", error)

    def _complete_batch(self, queue: str, jids: list[str]) -> list[None]:
        self.engine.complete_many(jids, self.worker, queue)
        return [None] * len(jids)

    async def release(self, queue: str, jids: list[str]) -> None:
        """Give items back to the head of their queue (an abort), no retry spent.

        The give-back is not the caller's to cancel: a connection that closes while its
        request gives an item back (its task cancelled) would otherwise cancel the release
        before it ran, and the item would stay locked until its lock ran out.
        """
        for jid in jids:
            self.open.pop(jid, None)
        if jids:
            await asyncio.shield(self._start_release(queue, jids))

    def _release(self, queue: str, jids: list[str]) -> None:
        try:
            self.engine.release(jids, self.worker, queue)
        except LannerError as error:  # their locks run out: they come back then
            logger.warning("could not give back %d item(s) of %s: %s", len(jids), queue, error)

    def _give_back(self, queue: str, job: Job | None) -> None:
        if job is not None:
            self._start_release(queue, [job.jid])

    def _start_release(self, queue: str, jids: list[str]) -> asyncio.Future[None]:
        """The release of `jids`, under way: `close` waits for it, and nobody cancels it."""
        release = asyncio.get_running_loop().run_in_executor(
            self._executor, self._release, queue, jids
        )
        self._giving_back.add(release)
        release.add_done_callback(self._giving_back.discard)
        return release

    # -- open items and other commands ----------------------------------------------------
    def hold(self, job: Job) -> None:
        """A reader holds `job` open: its lock is renewed from now on (`heartbeat_open`)."""
        self.open[job.jid] = OpenItem(job.queue, job.expires, job.expires - time.time())

    async def heartbeat_open(self) -> None:
        """Renew the lock of each open item once half of it has run, for as long as its
        reader holds it (Kestrel's open reads have no time limit)."""
        while True:
            await asyncio.sleep(HEARTBEAT_CHECK)
            now = time.time()
            for jid, item in list(self.open.items()):
                if item.expires - now > item.lease / 2:
                    continue
                try:
                    expires = await self.call(self.engine.heartbeat, jid, self.worker)
                except LannerError as error:
                    logger.warning("open item %s lost its lock: %s", jid, error)
                    expires = float("inf")  # not again: it is another reader's now
                if jid in self.open:
                    self.open[jid] = item._replace(expires=expires)

    async def call(self, function: Callable[..., R], *args: object) -> R:
        """Run one engine command in a thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def queues_read(self) -> set[str]:
        """The queues someone asked this server for (known to the engine or not)."""
        return set(self._readers)

    def waiters(self, queue: str) -> int:
        reader = self._readers.get(queue)
        return 0 if reader is None else sum(not f.done() for f, _ in reader.blocked)

    def last_read(self, queue: str) -> tuple[Job | None, float]:
        reader = self._readers.get(queue)
        return (None, 0.0) if reader is None else (reader.last_read, reader.last_read_at)

    async def close(self) -> None:
        """Wait for the pops under way (what they bring is given back), then the completions
        and releases."""
        for reader in self._readers.values():
            for future, _ in reader.blocked:
                _settle(future, None)
        await asyncio.gather(
            *(r.waiting for r in self._readers.values() if r.waiting), return_exceptions=True
        )
        await asyncio.gather(*self._completing, *self._giving_back, return_exceptions=True)
        self._blocking.shutdown(wait=True)
        self._executor.shutdown(wait=True)

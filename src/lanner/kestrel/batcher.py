"""Group commit: what many connections ask of the engine at once goes in one round trip.

A `Batcher` runs its `flush` in a thread for every item submitted while the previous flush
ran, so an idle server answers one request in one engine call, and a busy one answers a
hundred in one call as well. The engine is blocking (a SQLite transaction, a Redis round
trip): it never runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Final, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_BATCH: Final = 500


class Batcher(Generic[T, R]):
    """Submit items; each gets its own result (or exception) out of a shared `flush`.

    `flush(items)` returns one result per item, an exception instance for an item that
    failed; if it raises, every item of the batch gets that exception. `orphan(item,
    result)` is called for a result whose submitter stopped waiting (its connection went
    away): a job handed to nobody must be given back, never dropped.
    """

    def __init__(
        self,
        flush: Callable[[list[T]], Sequence[R | Exception]],
        executor: Executor,
        orphan: Callable[[T, R], None] | None = None,
    ) -> None:
        self._flush = flush
        self._executor = executor
        self._orphan = orphan
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._flushing = False
        self._draining: asyncio.Task[None] | None = None

    def enqueue(self, item: T) -> asyncio.Future[R]:
        """Add `item` to the next flush; its result comes in the future returned (nobody
        needs to wait for it: a flush runs whether or not anyone does)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if not self._flushing:
            self._flushing = True
            self._draining = loop.create_task(self._drain(loop))
        return future

    async def submit(self, item: T) -> R:
        future = self.enqueue(item)
        try:
            return await future
        except asyncio.CancelledError:
            # Cancelled after the result was set but before this task resumed: the result
            # would be lost with the task.
            if future.done() and not future.cancelled() and future.exception() is None:
                self._give_back(item, future.result())
            raise

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                items = [item for item, _ in batch]
                try:
                    results = await loop.run_in_executor(self._executor, self._flush, items)
                except Exception as error:
                    results = [error] * len(batch)
                for (item, future), result in zip(batch, results, strict=True):
                    if future.cancelled():
                        if not isinstance(result, Exception):
                            self._give_back(item, result)
                    elif isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._flushing = False

    def _give_back(self, item: T, result: R) -> None:
        if self._orphan is not None:
            self._orphan(item, result)

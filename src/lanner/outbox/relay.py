"""The relay: committed outbox rows put into the broker, each once, then deleted.

A pass takes the oldest rows (counting each as tried, committed first), puts their jobs
in one `put_many` with `if_exists="keep"`, and deletes the rows. A relay that dies between
its put and its delete leaves rows whose `tries` is above 0: the next pass looks their
jids up first (LOOKUP) and puts only the jobs the broker does not hold, in whatever state
(a job that already ran is not run again), with `if_exists="keep"` (a live one is left
alone). SQS can do neither: there such rows are put again (at-least-once in that window).

`OutboxRelay` runs passes in a thread of the worker command's supervisor process until
stopped: at once while there are rows, every `interval` seconds when the outbox is empty,
backing off while the broker or the database is away.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final, Protocol

from lanner.engine import Capability, Engine
from lanner.outbox.rows import OutboxRow, due_job

logger = logging.getLogger("lanner.outbox")

BATCH: Final = 100
"""Rows one pass relays (one put_many)."""


class Outbox(Protocol):
    """Where the relay reads rows: `SQLiteOutbox`, or lanner.contrib.django's."""

    def take(self, limit: int) -> list[OutboxRow]: ...

    def delete(self, ids: list[int]) -> None: ...


def relay_once(engine: Engine, outbox: Outbox, *, limit: int = BATCH) -> int:
    """Relay up to `limit` rows; return how many rows were taken (0: the outbox is empty)."""
    rows = outbox.take(limit)
    if not rows:
        return 0
    retried = [row.job.jid for row in rows if row.tries > 0]
    held: set[str] = set()
    if retried and Capability.LOOKUP in engine.capabilities:
        held = {job.jid for job in engine.multiget(retried)}
    now = time.time()
    keep = "keep" if Capability.UNIQUE in engine.capabilities else "move"
    jobs = [due_job(row, now, keep) for row in rows if row.job.jid not in held]
    if jobs:
        engine.put_many(jobs)
    outbox.delete([row.id for row in rows])
    return len(rows)


class OutboxRelay:
    """A thread relaying `outbox` to the engine `open_engine()` makes (in the thread)."""

    def __init__(
        self, open_engine: Callable[[], Engine], outbox: Outbox, *, interval: float = 0.2
    ) -> None:
        self._open_engine = open_engine
        self.outbox = outbox
        self.interval = interval
        self.relayed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lanner-outbox", daemon=True)

    def start(self) -> OutboxRelay:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def __enter__(self) -> OutboxRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        engine: Engine | None = None
        pause = self.interval
        while not self._stop.is_set():
            try:
                if engine is None:
                    engine = self._open_engine()
                taken = relay_once(engine, self.outbox)
                self.relayed += taken
                pause = self.interval
                if taken:
                    continue
            except Exception as error:  # a broker or database away: try again later
                logger.warning("outbox relay: %s (trying again in %g s)", error, pause)
                pause = min(pause * 2, 5.0)
            self._stop.wait(pause)
        if engine is not None:
            engine.close()

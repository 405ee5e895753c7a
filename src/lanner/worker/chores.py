"""Engine work the supervisor owes, done without ever holding up supervision.

Storing the queues' settings, and giving back the jobs of a worker process that died, take
engine calls; the store may be away, or its write lock held, for minutes. The supervisor
must meanwhile go on reaping, replacing and time-limiting its children, so it never waits
on the store: chores run a few at a time in each supervise round, through an engine of
its own that gives up after CHORE_MAX_WAIT, and what fails for want of the store is
tried again after a pause (growing to CHORE_MAX_PAUSE), in order, until it is done. A
store that refuses the configuration (`StoreMisconfigured`) is no outage: the chores are
dropped, and the supervisor told.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from lanner.engine import Engine
from lanner.errors import EngineUnavailable, LannerError, StoreMisconfigured
from lanner.worker.outage import Outage

if TYPE_CHECKING:
    from lanner.app import App

logger = logging.getLogger("lanner.pool")

CHORE_MAX_WAIT: Final = 0.2
"""The longest a chore's engine call waits for the store before giving up for now."""

CHORE_MAX_PAUSE: Final = 0.5
"""The longest pause between tries of a chore: a dead worker's finished jobs must be
completed soon after the store is back, before their expired locks' grace period ends
and they run again elsewhere."""

ROUND_BUDGET: Final = 0.2
"""Chores stop for a supervise round once they have taken this long."""

Chore = Callable[[Engine], None]


class Chores:
    """A queue of engine work, done a step at a time through an impatient engine."""

    def __init__(
        self,
        app: App,
        on_unavailable: Callable[[], None] | None = None,
        on_refused: Callable[[StoreMisconfigured], None] | None = None,
    ) -> None:
        """`on_unavailable` is called each time a chore finds the store away; `on_refused`
        when the store refuses the configuration (the chores are dropped then: none can be
        done with it)."""
        self._app = app
        self._on_unavailable = on_unavailable
        self._on_refused = on_refused
        self._impatient: Engine | None = None
        self._pending: deque[tuple[str, Chore]] = deque()
        self._outage = Outage(app.settings.broker)
        self._next_try = 0.0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, what: str, chore: Chore) -> None:
        self._pending.append((what, chore))

    def run(self) -> None:
        """Do chores until none is left, the round's budget is spent, or the store fails."""
        started = time.monotonic()
        if not self._pending or started < self._next_try:
            return
        while self._pending and time.monotonic() - started < ROUND_BUDGET:
            what, chore = self._pending[0]
            try:
                if self._impatient is None:
                    self._impatient = self._app.reopen_engine(max_wait=CHORE_MAX_WAIT)
                chore(self._impatient)
            except EngineUnavailable as error:
                self._outage.failed(error)
                if self._on_unavailable is not None:
                    self._on_unavailable()
                self._next_try = time.monotonic() + min(self._outage.backoff.pause, CHORE_MAX_PAUSE)
                self._outage.backoff.grow()
                return
            except StoreMisconfigured as error:
                self._pending.clear()
                if self._on_refused is not None:
                    self._on_refused(error)
                return
            except LannerError as error:
                logger.warning("%s: %s", what, error)
            except Exception:
                logger.exception("%s failed", what)
            self._pending.popleft()
            self._outage.ended()

    def close(self) -> None:
        if self._impatient is not None:
            self._impatient.close()
            self._impatient = None

"""Waiting out a store that is away: growing pauses, and logs that say since when.

Neither a worker process nor the supervisor ever exits because the store cannot be
reached: each waits with backoff, says once what it waits for and since when, repeats it
at each longer pause, and says when the store is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lanner.engines import shown_url
from lanner.errors import LannerError

logger = logging.getLogger("lanner.worker")


class Backoff:
    """Growing pauses (0.5 s, doubling up to 30 s) while something stays unavailable."""

    def __init__(self, first: float = 0.5, longest: float = 30.0) -> None:
        self._first = first
        self._longest = longest
        self.pause = first

    def reset(self) -> None:
        self.pause = self._first

    def sleep(self, interrupted: Callable[[], bool], at_most: float = float("inf")) -> None:
        """Sleep the current pause (or `at_most`) in short steps, so a stop is seen; then
        grow it."""
        deadline = time.monotonic() + min(self.pause, at_most)
        while not interrupted() and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        self.grow()

    def grow(self) -> None:
        self.pause = min(self.pause * 2, self._longest)


class Outage:
    """What one process knows of the store's absence: since when, and how long to wait."""

    def __init__(self, store: str, first_pause: float = 0.5) -> None:
        self.store = shown_url(store)
        self.backoff = Backoff(first_pause)
        self.since: float | None = None  # wall time of the first failure, None: no outage
        self._said = 0.0  # when the outage was last logged (monotonic)

    def failed(self, error: LannerError) -> None:
        """The store failed a command now: say so (with since when) at the first failure,
        then again each time the pause has doubled, however often it is tried."""
        if self.since is None:
            self.since = time.time()
            self._said = 0.0
        if time.monotonic() - self._said < self.backoff.pause / 2:
            return
        self._said = time.monotonic()
        started = time.strftime("%H:%M:%S", time.localtime(self.since))
        logger.warning("waiting for %s since %s (%s)", self.store, started, error)

    def ended(self) -> None:
        if self.since is not None:
            logger.warning("%s is back after %.1f s", self.store, time.time() - self.since)
            self.since = None
            self.backoff.reset()

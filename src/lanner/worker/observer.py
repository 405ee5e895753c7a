"""What a worker pool's supervisor tells whoever watches it (`PoolObserver`): the metrics of
`lanner worker --metrics-port` (lanner.metrics.pool), or no one (`NoObserver`).

The supervisor calls it from its own thread, between supervision rounds, and asks it
before each fork whether it is ready to fork (`ready_to_fork`): an observer that runs a
thread or holds a socket stops and closes them first, so nothing of it crosses into a
child, and starts them again once the children are forked (`forked`).
"""

from __future__ import annotations

from typing import Literal, Protocol, TypeAlias

Process: TypeAlias = Literal["supervisor", "worker"]


class PoolObserver(Protocol):
    def job_finished(self, queue: str, task: str, outcome: str, seconds: float) -> None:
        """A child's job ended: completed, failed, retried or stopped, after `seconds`."""

    def children(self, alive: int) -> None:
        """The supervisor has `alive` child processes now."""

    def recycled(self, reason: str) -> None:
        """A child exited at a limit (`max-tasks`, `max-memory`), to be replaced."""

    def hard_killed(self) -> None:
        """A child was killed: its task ran past its time limit and grace, or did not stop
        after it was cancelled or lost its lock."""

    def engine_error(self, process: Process) -> None:
        """An engine command failed in the supervisor (a chore) or in a child."""

    def ready_to_fork(self) -> bool:
        """True when nothing of the observer (thread, socket) would cross a fork; False:
        ask again at the next round (it is stopping). Called before each batch of forks."""

    def forked(self) -> None:
        """The forks are done: the observer may start its thread again."""

    def close(self) -> None:
        """The pool has stopped."""


class NoObserver:
    """Watches nothing: a pool without metrics."""

    def job_finished(self, queue: str, task: str, outcome: str, seconds: float) -> None:
        pass

    def children(self, alive: int) -> None:
        pass

    def recycled(self, reason: str) -> None:
        pass

    def hard_killed(self) -> None:
        pass

    def engine_error(self, process: Process) -> None:
        pass

    def ready_to_fork(self) -> bool:
        return True

    def forked(self) -> None:
        pass

    def close(self) -> None:
        pass

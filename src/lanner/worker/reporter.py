"""What a worker loop tells whoever supervises its process (`Reporter`), so that the
supervisor can step in if the process dies: the pool's children report through a pipe
(`child.PipeReporter`); a loop run alone (`drain`, tests) reports to no one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias

Outcome: TypeAlias = Literal["completed", "failed", "retried", "stopped", ""]
"""How a job's run ended: its task succeeded (`completed`: the completion is stored with
its batch's), it failed for good (`failed`) or will run again (`retried`), or it was told
to stop, cancelled or its lock lost (`stopped`: nothing of it kept). "": not said."""


class Reporter(Protocol):
    """Where a loop says what it does, so a supervisor can step in if its process dies."""

    def batch(self, queue: str, jids: Sequence[str]) -> None: ...

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None: ...

    def stopping(self, jid: str, why: str) -> None: ...

    def finished(
        self,
        jid: str,
        succeeded: bool,
        outcome: Outcome = "",
        klass: str = "",
        seconds: float = 0.0,
    ) -> None:
        """The job's run ended (`seconds` long; 0 for a job refused before its task ran)."""

    def completed(self, jids: Sequence[str]) -> None: ...

    def flushed(self) -> None: ...

    def engine_error(self) -> None:
        """An engine command failed (the store away, mostly); the loop waits and retries."""


class NoReporter:
    """Reports to no one: a loop that runs without a supervisor."""

    def batch(self, queue: str, jids: Sequence[str]) -> None:
        pass

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None:
        pass

    def stopping(self, jid: str, why: str) -> None:
        pass

    def finished(
        self,
        jid: str,
        succeeded: bool,
        outcome: Outcome = "",
        klass: str = "",
        seconds: float = 0.0,
    ) -> None:
        pass

    def completed(self, jids: Sequence[str]) -> None:
        pass

    def flushed(self) -> None:
        pass

    def engine_error(self) -> None:
        pass

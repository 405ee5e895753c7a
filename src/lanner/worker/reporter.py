"""What a worker loop tells whoever supervises its process (`Reporter`), so that the
supervisor can step in if the process dies: the pool's children report through a pipe
(`child.PipeReporter`); a loop run alone (`drain`, tests) reports to no one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Reporter(Protocol):
    """Where a loop says what it does, so a supervisor can step in if its process dies."""

    def batch(self, queue: str, jids: Sequence[str]) -> None: ...

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None: ...

    def stopping(self, jid: str, why: str) -> None: ...

    def finished(self, jid: str, succeeded: bool) -> None: ...

    def completed(self, jids: Sequence[str]) -> None: ...

    def flushed(self) -> None: ...


class NoReporter:
    """Reports to no one: a loop that runs without a supervisor."""

    def batch(self, queue: str, jids: Sequence[str]) -> None:
        pass

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None:
        pass

    def stopping(self, jid: str, why: str) -> None:
        pass

    def finished(self, jid: str, succeeded: bool) -> None:
        pass

    def completed(self, jids: Sequence[str]) -> None:
        pass

    def flushed(self) -> None:
        pass

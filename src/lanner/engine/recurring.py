"""The RECURRING commands: templates that spawn a job into their queue every interval."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lanner import checks
from lanner.checks import names, values
from lanner.engine.capabilities import Capability, Commands
from lanner.records import RecurringJob


class RecurringCommands(Commands):
    """recur, unrecur, recur_get, recur_update, recur_tag, recur_untag."""

    def recur(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str,
        interval: float,
        offset: float = 0.0,
        *,
        priority: int = 0,
        tags: Sequence[str] = (),
        retries: int = 0,
        backlog: int = 0,
        now: float | None = None,
    ) -> str:
        """RECURRING: a template that spawns job `<jid>-<n>` into `queue` every `interval` s."""
        self._require(Capability.RECURRING, "recur")
        command = checks.recur(
            queue, jid, klass, data, interval, offset, priority, tags, retries, backlog, now,
            self.max_data_bytes,
        )  # fmt: skip
        self._recur(command)
        return command.jid

    def unrecur(self, jid: str, *, now: float | None = None) -> None:
        self._require(Capability.RECURRING, "unrecur")
        self._unrecur(names.label(jid, "jid"), values.now(now))

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None:
        self._require(Capability.RECURRING, "recur_get")
        return self._recur_get(names.label(jid, "jid"), values.now(now))

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        """RECURRING: change priority, interval, retries, data, klass, queue or backlog."""
        self._require(Capability.RECURRING, "recur_update")
        self._recur_update(checks.recur_update(jid, changes, now, self.max_data_bytes))

    def recur_tag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        self._require(Capability.RECURRING, "recur_tag")
        return self._recur_retag(checks.retag(jid, tags, now), add=True)

    def recur_untag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        self._require(Capability.RECURRING, "recur_untag")
        return self._recur_retag(checks.retag(jid, tags, now), add=False)

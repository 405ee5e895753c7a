"""The commands on jobs named by jid, outside their working life: managing them (cancel,
timeout, priority), reading them (get, wait, multiget, outcomes), their dependencies, tags,
history entries and tracking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lanner import checks
from lanner.checks import names, values
from lanner.engine.capabilities import Capability, Commands
from lanner.job import Job
from lanner.records import JobOutcome, JobPage


class JobCommands(Commands):
    """The commands that manage and read given jobs."""

    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        """CANCEL: delete jobs everywhere. Refuses (InvalidState) if another job depends on
        one of them."""
        command = checks.jids(jids, now)
        self._require(Capability.CANCEL, "cancel")
        return self._cancel(command) if command.jids else []

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        """Force running jobs' locks to expire: they become `stalled` and are popped first."""
        self._require(Capability.TIMEOUT, "timeout")
        command = checks.jids(jids, now)
        if command.jids:
            self._timeout(command)

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None:
        self._require(Capability.PRIORITY, "priority")
        self._set_priority(checks.priority(jid, priority, now))

    def get(self, jid: str, *, now: float | None = None) -> Job | None:
        """LOOKUP: the job, or None if there is none of that jid."""
        command = checks.Jids([names.label(jid, "jid")], values.now(now))
        self._require(Capability.LOOKUP, "get")
        found = self._multiget(command)
        return found[0] if found else None

    def wait(self, jid: str, *, timeout: float, now: float | None = None) -> Job | None:
        """WAIT: block until the job is complete or failed, at most `timeout` seconds.

        Returns the job (finished, or as it is when the wait ends), or None if there is no
        such job (never was, or cancelled, or removed by retention). Waits on the store's
        own signal (commits, or a list the finishing command pushes to), not by polling.
        """
        self._require(Capability.WAIT, "wait")
        return self._wait(checks.wait(jid, timeout, now))

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        """LOOKUP: the jobs that exist among `jids`, in the order asked."""
        command = checks.jids(jids, now, unique=False)
        self._require(Capability.LOOKUP, "multiget")
        return self._multiget(command) if command.jids else []

    def outcomes(self, jids: Sequence[str], *, now: float | None = None) -> list[JobOutcome]:
        """LOOKUP: the state, result and failure of the jobs that exist among `jids`, in
        the order asked: `multiget` without the rest of each job (history, dependencies),
        for reading many results at once (a workflow's step, its parents')."""
        command = checks.jids(jids, now, unique=False)
        self._require(Capability.LOOKUP, "outcomes")
        return self._outcomes(command) if command.jids else []

    # -- optional capabilities ------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        """DEPENDENCIES: make a job in state `depends` also wait for `jids`."""
        self._require(Capability.DEPENDENCIES, "depends_add")
        self._depends(checks.depends(jid, jids, now), add=True)

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        """DEPENDENCIES: drop some (None: all) dependencies; with none left the job is released."""
        self._require(Capability.DEPENDENCIES, "depends_remove")
        self._depends(checks.depends(jid, jids, now), add=False)

    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        """TAGS: add tags; return the job's tags."""
        self._require(Capability.TAGS, "tag_add")
        return self._retag(checks.retag(jid, tags, now), add=True)

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        """TAGS: remove tags; return the job's tags."""
        self._require(Capability.TAGS, "tag_remove")
        return self._retag(checks.retag(jid, tags, now), add=False)

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        """TAGS: jobs carrying `tag` (total and a page of jobs), oldest tagging first."""
        self._require(Capability.TAGS, "tagged")
        return self._tagged(checks.tagged_page(tag, offset, count, now))

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        """TAGS: the tags on at least two jobs, most used first."""
        self._require(Capability.TAGS, "tags_top")
        command = checks.top_page(offset, count, now)
        return self._tags_top(command) if command.limit else []

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        """LOG: append a custom entry to a job's history."""
        self._require(Capability.LOG, "log")
        self._log(checks.log(jid, message, data, now))

    def track(self, jid: str, *, now: float | None = None) -> None:
        """TRACKING: mark a job as tracked."""
        self._require(Capability.TRACKING, "track")
        self._track(names.label(jid, "jid"), True, values.now(now))

    def untrack(self, jid: str, *, now: float | None = None) -> None:
        self._require(Capability.TRACKING, "untrack")
        self._track(names.label(jid, "jid"), False, values.now(now))

    def tracked(self, *, now: float | None = None) -> list[Job]:
        self._require(Capability.TRACKING, "tracked")
        return self._tracked(values.now(now))

"""The commands of a job's working life: putting it (put, put_many, requeue), taking it
(pop, peek, heartbeat, heartbeat_many), and finishing it (complete, complete_many, release,
fail, retry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lanner import checks
from lanner.engine.capabilities import Capability, Commands
from lanner.job import Job
from lanner.records import Flow, NewJob


class WorkCommands(Commands):
    """What producers and workers call: a job put, taken and finished."""

    # -- putting work ---------------------------------------------------------------------
    def put(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        if_exists: str = "move",
        expires_at: float | None = None,
        flow: Flow | None = None,
        now: float | None = None,
    ) -> str:
        """Create the job, or move it if `jid` exists (its lock, failure and queue are dropped).

        On a move, `priority`, `tags`, `retries` and `depends` left as None keep their old
        values; a new job gets 0, no tags, `DEFAULT_RETRIES` and no dependencies. State
        afterwards: `depends` if some dependency is not complete, else `scheduled` if
        `delay > 0`, else `waiting`. `worker` names who is putting. `if_exists` (UNIQUE):
        `keep` leaves a live job of that jid as it is (nothing stored); `move-unless-running`
        refuses (`InvalidState`) to move a running one. Returns the jid.

        LIMITS: the job is dropped, never handed out, once `expires_at` (a Unix time) is past
        while it waits; the queue's `max-age` caps it. A put into a queue at its `max-items`
        or `max-size` drops waiting jobs from the queue's head (pop order) if it discards
        old ones when full, else raises `QueueFull`; data over `max-item-size` raises
        `PayloadTooLarge`.
        FLOW: `flow` holds the job back at pops while its concurrency key is at its cap (it
        waits aside until one of the key's jobs stops running) or a rate limit has no room
        (it is scheduled for when there is), without spending a retry. FAIRNESS: its
        `fair_key` makes it take turns with the queue's jobs of other keys.
        FANOUT: a put into `q` also puts the job into every `q+<child>` popped or peeked at
        least once, as jid `<jid>+<child>` (without `depends`; a child that is full and does
        not discard drops its copy, counted as discarded).
        """
        given = NewJob(
            queue,
            jid,
            klass,
            data,
            delay,
            priority,
            tags,
            retries,
            depends,
            if_exists,
            expires_at,
            flow,
        )
        return self._put_checked("put", checks.put(given, worker, now, self.max_data_bytes))[0]

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        """`put` every job in one round trip and one transaction: all or none are stored."""
        return self._put_checked("put_many", checks.put_many(jobs, now, self.max_data_bytes))

    def requeue(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        if_exists: str = "move",
        expires_at: float | None = None,
        flow: Flow | None = None,
        now: float | None = None,
    ) -> str:
        """LOOKUP: like `put`, but the job must exist (else `JobNotFound`)."""
        given = NewJob(
            queue,
            jid,
            klass,
            data,
            delay,
            priority,
            tags,
            retries,
            depends,
            if_exists,
            expires_at,
            flow,
        )
        checked = checks.put(given, worker, now, self.max_data_bytes)
        self._require(Capability.LOOKUP, "requeue")
        return self._put_checked("requeue", checked)[0]

    def _put_checked(self, command: str, checked: checks.Put) -> list[str]:
        if len(self.capabilities) < len(Capability):  # nothing to refuse on most engines
            for job in checked.jobs:
                self._gate_put(job)
        return self._put(command, checked) if checked.jobs else []

    def _gate_put(self, job: NewJob) -> None:
        if job.delay:
            self._require(Capability.DELAY, "put(delay=...)")
        if job.priority:  # 0 is every job's priority where there is no ordering by it
            self._require(Capability.PRIORITY, "put(priority=...)")
        if job.tags:
            self._require(Capability.TAGS, "put(tags=...)")
        if job.depends:
            self._require(Capability.DEPENDENCIES, "put(depends=...)")
        if job.if_exists != "move":
            self._require(Capability.UNIQUE, f"put(if_exists={job.if_exists!r})")
        if job.expires_at is not None:
            self._require(Capability.LIMITS, "put(expires_at=...)")
        flow = job.flow
        if flow is not None:
            if flow.max_concurrency:
                self._require(Capability.FLOW, "put(flow=Flow(concurrency_key=...))")
            if flow.rates:
                self._require(Capability.FLOW, "put(flow=Flow(rates=...))")
            if flow.fair_key is not None:
                self._require(Capability.FAIRNESS, "put(flow=Flow(fair_key=...))")
        self._gate_fanout(job.queue, "put")

    # -- taking work ----------------------------------------------------------------------
    def pop(
        self,
        queue: str,
        worker: str,
        count: int = 1,
        *,
        wait: float = 0.0,
        now: float | None = None,
    ) -> list[Job]:
        """Lock up to `count` jobs for `worker`, highest priority first, then oldest first.

        Expired locks are taken first (after the grace period), then due scheduled jobs
        join the waiting ones. Each job becomes `running` with `expires = now + heartbeat`.
        A paused queue gives nothing. With `wait > 0` and nothing to give, blocks up to
        `wait` seconds and returns as soon as work arrives. LIMITS: waiting jobs whose
        `expires_at` is past are dropped (counted `expired`), not given. FANOUT: a pop of
        `q+<child>` makes it a child of `q` from then on (a peek too).
        """
        command = checks.pop(queue, worker, count, wait, now)
        if command.wait:
            self._require(Capability.BLOCKING_POP, "pop(wait=...)")
        if len(self.capabilities) < len(Capability):
            self._gate_fanout(command.queue, "pop")
        return self._pop(command)

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        """LISTING: the jobs `pop` would give next, without locking them (works on paused
        queues)."""
        command = checks.peek(queue, count, now)
        self._require(Capability.LISTING, "peek")
        self._gate_fanout(command.queue, "peek")
        return self._peek(command)

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        """Extend `worker`'s lock on a running job (and replace its data); return the new expiry."""
        return self._heartbeat(checks.heartbeat(jid, worker, data, now, self.max_data_bytes))

    def heartbeat_many(
        self, jids: Sequence[str], worker: str, *, now: float | None = None
    ) -> dict[str, float]:
        """Extend `worker`'s locks on many running jobs in one round trip (a process's jobs
        in flight, at most `checks.MAX_HEARTBEAT_JIDS`); return jid -> new expiry for each
        lock extended, in the order asked.

        A jid left out is a job `worker` no longer holds (cancelled, finished, timed out,
        handed to another worker, or unknown): lost to it, never an error of the call.
        """
        command = checks.heartbeats(jids, worker, now)
        return self._heartbeat_many(command) if command.jids else {}

    # -- finishing work -------------------------------------------------------------------
    def complete(
        self,
        jid: str,
        worker: str,
        queue: str,
        data: str | None = None,
        *,
        next: str | None = None,
        delay: float = 0.0,
        depends: Sequence[str] | None = None,
        result: str | None = None,
        now: float | None = None,
    ) -> str:
        """Complete a job `worker` holds in `queue`, or advance it to `next`; return its state.

        `result` (RESULTS): JSON text kept with the completed job (`Job.result`) until
        retention removes it.
        """
        command = checks.complete(
            jid, worker, queue, data, next, delay, depends, result, now, self.max_data_bytes
        )
        if command.result is not None:
            self._require(Capability.RESULTS, "complete(result=...)")
        if command.delay:
            self._require(Capability.DELAY, "complete(delay=...)")
        if command.depends:
            self._require(Capability.DEPENDENCIES, "complete(depends=...)")
        return self._complete(command)

    def complete_many(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        results: Mapping[str, str] | None = None,
        now: float | None = None,
    ) -> list[str]:
        """Complete many jobs in one round trip; return the jids completed.

        A jid whose lock `worker` no longer holds is skipped (its job goes on elsewhere).
        `results` (RESULTS) maps jids to the JSON text each keeps.
        """
        command = checks.settle(jids, worker, queue, 0.0, now, results, self.max_data_bytes)
        if command.results:
            self._require(Capability.RESULTS, "complete_many(results=...)")
        return self._complete_many(command) if command.jids else []

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        spend_retry: bool = False,
        now: float | None = None,
    ) -> list[str]:
        """Give back jobs `worker` holds in `queue` without running them; return the jids released.

        They become waiting again in their old place (or scheduled `delay` seconds ahead),
        with no retry spent (Kestrel's abort, SQS's visibility timeout set to `delay`), or
        with one spent each (`spend_retry`: they were tried, by a worker that died running
        them). Jids whose lock `worker` no longer holds are skipped.
        """
        command = checks.settle(jids, worker, queue, delay, now, spend_retry=spend_retry)
        if command.delay:
            self._require(Capability.DELAY, "release(delay=...)")
        return self._release(command) if command.jids else []

    def fail(
        self,
        jid: str,
        worker: str,
        group: str,
        message: str,
        data: str | None = None,
        *,
        now: float | None = None,
    ) -> str:
        """Fail a running job into failure `group`. Returns the jid."""
        command = checks.fail(jid, worker, group, message, data, now, self.max_data_bytes)
        self._fail(command)
        return command.jid

    def retry(
        self,
        jid: str,
        queue: str,
        worker: str,
        delay: float = 0.0,
        group: str | None = None,
        message: str | None = None,
        *,
        now: float | None = None,
    ) -> int:
        """Give a running job back for another try; return the retries remaining.

        When none remain the job fails, into `group` (default `failed-retries-<queue>`).
        """
        command = checks.retry(jid, queue, worker, delay, group, message, now)
        if command.delay:
            self._require(Capability.DELAY, "retry(delay=...)")
        return self._retry(command)

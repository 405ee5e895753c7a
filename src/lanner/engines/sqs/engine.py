"""The SQS engine: lanner's job contract, as far as Amazon SQS can honour it, on SQS queues.

Data layout.
- Queues: lanner queue `<name>` is the SQS standard queue `<prefix><name>`; its failed
  jobs go to the dead-letter queue `<dlq_prefix><prefix><name>` (Kale's `dlq-<name>` with
  no prefix). The prefix (URL option) namespaces an application or a release
  (`prefix=myapp-v42-`): old and new code never share a queue. Names are checked against
  SQS's rule (1 to 80 of letters, digits, '-', '_', prefixes included), never rewritten.
- Queue attributes, set when the engine creates a queue on first use: VisibilityTimeout
  (the lock a pop takes: option `visibility_timeout`, then `config_set("<q>-heartbeat")`,
  which every process sees), MaximumMessageSize (option `max_message_bytes`; `put` refuses
  bigger messages before sending anything), MessageRetentionPeriod 14 days (SQS's most).
- Message body: one ASCII JSON object, `{"lanner-job": 1, "jid", "klass", "queue",
  "data", "retries", "remaining", "put", ["due"], ["released"], ["fair"]}` (messages.py).
  No message attributes are used; the system attribute ApproximateReceiveCount is read at
  each receive: every earlier delivery of a message spent a retry (a lock that ran out).
  A job with a fair key (FAIRNESS) is sent with a MessageGroupId made of it, every time:
  the standard queue is then one of SQS's fair queues, no setting needed.
- Dead letter: the body plus `"failure": {"group", "message", "when", "worker"}`; a
  message that was no lanner job is kept as `"foreign"` text with group `lanner-not-a-job`.

Commands. put/put_many: SendMessageBatch (10 a call). pop: ReceiveMessage, long-polling
whole seconds (at most 20 a call) under the queue's VisibilityTimeout. heartbeat:
ChangeMessageVisibility; heartbeat_many: ChangeMessageVisibilityBatch (10 a call, per
queue; an entry SQS fails is a lock lost). complete/complete_many: DeleteMessage(Batch).
release, retry and a delay: the message is sent again (its counters in its body, a delay as
DelaySeconds, or `due` past 900 s) and the received one deleted. fail: a dead letter, then
the delete. What SQS cannot do (find a message by jid, list or peek a queue, cancel,
priorities within a queue, a store of settings, rate limits and concurrency keys) is left
out of `capabilities` and raises `Unsupported`. Receipt handles live in the popping
process (receipts.py); counts are reused briefly (counts.py); every request is counted
(`requests`). Delivery is at-least-once, as everywhere: SQS standard queues may also
deliver a message twice on their own.
"""

from __future__ import annotations

import math
from typing import Final

from lanner import checks
from lanner.engine import CONFIG_DEFAULTS, Capability, Engine, lease_queue
from lanner.engines.sqs.batches import Outcome, Settling, change_visibility, delete
from lanner.engines.sqs.connection import (
    MAX_VISIBILITY,
    SQSClient,
    SQSOptions,
    SQSRefused,
    impatient,
    parse_url,
)
from lanner.engines.sqs.counts import COUNT_ATTRIBUTES, CountsCache, from_attributes
from lanner.engines.sqs.messages import FAILURE_ROOM, Body
from lanner.engines.sqs.outbox import Outbox, scheduled
from lanner.engines.sqs.queues import QueueDirectory
from lanner.engines.sqs.receipts import Receipt, Receipts
from lanner.engines.sqs.receive import Receiver
from lanner.errors import LockLost, MalformedArgument, PayloadTooLarge, Unsupported
from lanner.job import Job
from lanner.records import DEFAULT_RETRIES, ConfigValue, JobPage, QueueCounts

_LOST_CODES: Final = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "InvalidParameterValue",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    }
)
"""Errors of a request on a received message that mean its lock is lost: the handle is
stale (the lock ran out, another worker has it) or the message or queue is gone."""


class SQSEngine(Engine):
    """The SQS engine. Safe to share between threads; each process has its own client."""

    name = "sqs"
    # FAIRNESS is SQS's fair queues: a job's fair key is its messages' MessageGroupId.
    capabilities = frozenset({Capability.DELAY, Capability.BLOCKING_POP, Capability.FAIRNESS})
    follows_now = False  # visibility timeouts and delays run on SQS's clock

    def __init__(self, url: str = "sqs://", *, options: SQSOptions | None = None) -> None:
        """`options` replace those of the URL's query."""
        self._url = url
        self.region, self.options = parse_url(url)
        if options is not None:
            self.options = options
        self.client = SQSClient(self.region, self.options)
        self.directory = QueueDirectory(self.client, self.options)
        self.counts = CountsCache(self.options.counts_cache_sec)
        self.receipts = Receipts()
        self.outbox = Outbox(
            self.client, self.directory, self.counts, self.options.max_message_bytes
        )
        self.receiver = Receiver(
            self.client,
            self.directory,
            self.counts,
            self.receipts,
            self.outbox,
            self.options.read_timeout,
        )

    @property
    def max_data_bytes(self) -> int:
        """Job data must leave room in a message for its envelope and a dead letter's failure."""
        return self.options.max_message_bytes - FAILURE_ROOM

    @property
    def requests(self) -> dict[str, int]:
        """HTTP requests this process sent to SQS through this engine, by API name."""
        return self.client.requests

    def __repr__(self) -> str:
        return f"SQSEngine({self.region or 'default region'!r}, prefix={self.options.prefix!r})"

    def reopen(self, *, max_wait: float | None = None) -> SQSEngine:
        options = self.options if max_wait is None else impatient(self.options, max_wait)
        return SQSEngine(self._url, options=options)

    def close(self) -> None:
        self.client.close()

    # -- configuration --------------------------------------------------------------------
    def _config_get(self, key: str) -> ConfigValue | None:
        if key == "heartbeat":
            return self.options.visibility_timeout
        queue = lease_queue(key)
        if queue is not None:
            return self.directory.fresh_lease(queue)
        return CONFIG_DEFAULTS.get(key)

    def _config_all(self) -> dict[str, ConfigValue]:
        return {**CONFIG_DEFAULTS, "heartbeat": self.options.visibility_timeout}

    def _config_set(self, setting: checks.Setting, now: float) -> None:
        queue = lease_queue(setting.key)
        if queue is None:  # Engine.config_set lets only a queue's lock through
            raise Unsupported(self.name, "config_set", Capability.CONFIG.value)
        value = setting.value
        if isinstance(value, str) or not 0 <= value <= MAX_VISIBILITY:
            raise MalformedArgument(
                f"config_set({setting.key!r}): a queue's lock on SQS is its VisibilityTimeout, "
                f"0 to {MAX_VISIBILITY} seconds, not {value!r}"
            )
        # Whole seconds on SQS: rounded up, the lock lasts at least as long as asked.
        self.directory.set_lease(queue, math.ceil(value))

    def _config_unset(self, key: str, now: float) -> None:
        queue = lease_queue(key)
        if queue is not None and self.directory.existing(queue) is not None:
            self.directory.set_lease(queue, self.options.visibility_timeout)
        # Any other key cannot have been set here: unset already.

    # -- putting work ---------------------------------------------------------------------
    def _put(self, command: str, checked: checks.Put) -> list[str]:
        bodies: list[tuple[Body, int]] = []
        for job in checked.jobs:
            self.directory.sqs_name(job.queue)  # every name checked before any request
            retries = DEFAULT_RETRIES if job.retries is None else job.retries
            fair = None if job.flow is None else job.flow.fair_key  # FAIRNESS only: gated
            body = Body(
                job.jid, job.klass, job.queue, job.data, retries, retries, checked.now, fair=fair
            )
            bodies.append(scheduled(body, job.delay, checked.now))
        self._check_sizes(command, [body for body, _ in bodies], self.options.max_message_bytes)
        by_queue: dict[str, list[tuple[Body, int]]] = {}
        for body, delay in bodies:
            by_queue.setdefault(body.queue, []).append((body, delay))
        for queue, entries in by_queue.items():  # queues made (and their limits read) ...
            limit = self.directory.info(queue).max_message_bytes
            self._check_sizes(command, [body for body, _ in entries], limit)
        for queue, entries in by_queue.items():  # ... before anything is sent
            self.outbox.send_jobs(queue, entries, "jobs")
        return [job.jid for job in checked.jobs]

    def _check_sizes(self, command: str, bodies: list[Body], limit: int) -> None:
        for body in bodies:
            size = len(body.encoded())
            if size > limit - FAILURE_ROOM:
                raise PayloadTooLarge(
                    f"{command}(): job {body.jid!r} would be a message of {size} bytes (its "
                    f"data as ASCII JSON, in lanner's envelope); queue {body.queue!r} takes "
                    f"{limit - FAILURE_ROOM} (its MaximumMessageSize {limit}, less "
                    f"{FAILURE_ROOM} kept for a dead letter's failure); nothing was sent"
                )

    # -- taking work ----------------------------------------------------------------------
    def _pop(self, command: checks.Pop) -> list[Job]:
        return self.receiver.pop(command)

    def _peek(self, command: checks.Peek) -> list[Job]:
        raise Unsupported(self.name, "peek", Capability.LISTING.value)

    def _heartbeat(self, command: checks.Heartbeat) -> float:
        held = self.receipts.held(command.jid, command.worker, "heartbeat")
        if command.data is not None:
            raise Unsupported(
                self.name, "heartbeat(data=...)", "", "the sqs engine cannot replace a "
                "running job's data: an SQS message's body never changes",
            )  # fmt: skip
        self._on_message(
            held, "heartbeat", "change_message_visibility", VisibilityTimeout=held.lease
        )
        return held.renewed(command.now)

    def _heartbeat_many(self, command: checks.Heartbeats) -> dict[str, float]:
        held = self.receipts.held_of(command.jids, command.worker)
        by_url: dict[str, list[Receipt]] = {}
        for receipt in held:
            by_url.setdefault(receipt.url, []).append(receipt)
        renewed: dict[str, float] = {}
        for url, receipts in by_url.items():
            by_key = {str(index): receipt for index, receipt in enumerate(receipts)}
            settling = [Settling(key, r.handle, r.lease) for key, r in by_key.items()]
            try:
                outcome = change_visibility(self.client, url, settling)
            except SQSRefused as error:
                if error.code not in _LOST_CODES:
                    raise
                # The whole call refused as one entry would be (the queue is gone): all lost.
                outcome = Outcome(failed=dict.fromkeys(by_key, error.code))
            for key in outcome.done:
                renewed[by_key[key].body.jid] = by_key[key].renewed(command.now)
            for key in outcome.failed:  # a stale handle, or SQS failed it twice: lost
                self.receipts.drop(by_key[key].body.jid, by_key[key])
        return {jid: renewed[jid] for jid in command.jids if jid in renewed}

    def _on_message(self, held: Receipt, command: str, operation: str, **arguments: object) -> None:
        """One request on a held message; a stale handle (the lock was lost) is `LockLost`."""
        try:
            self.client.call(operation, QueueUrl=held.url, ReceiptHandle=held.handle, **arguments)
        except SQSRefused as error:
            if error.code not in _LOST_CODES:
                raise
            self.receipts.drop(held.body.jid, held)
            raise LockLost(
                f"{command}(): job {held.body.jid!r}: its lock was lost ({error.code}: the "
                "lock ran out and another worker may have it, or its message is gone)"
            ) from None

    # -- finishing work -------------------------------------------------------------------
    def _complete(self, command: checks.Complete) -> str:
        held = self.receipts.held(command.jid, command.worker, "complete", command.queue)
        state = "complete"
        if command.next is not None:
            self.directory.sqs_name(command.next)
            body = held.body.again(
                queue=command.next,
                data=held.body.data if command.data is None else command.data,
                remaining=held.body.retries,
                put=command.now,
                released=0,
            )
            entry = scheduled(body, command.delay, command.now)
            self._check_sizes(
                "complete", [entry[0]], self.directory.info(command.next).max_message_bytes
            )
            self.outbox.send_jobs(command.next, [entry], "jobs")
            state = "scheduled" if command.delay else "waiting"
        self._on_message(held, "complete", "delete_message")
        self.receipts.drop(command.jid, held)
        self.counts.settled(held.queue, 1)
        return state

    def _complete_many(self, command: checks.Settle) -> list[str]:
        held = self.receipts.held_of(command.jids, command.worker, command.queue)
        return self.delete_held(held)

    def delete_held(self, held: list[Receipt]) -> list[str]:
        """Delete held messages (their jobs are done, or moved on); the jids deleted. One
        whose handle is stale is skipped: its lock was lost."""
        if not held:
            return []
        by_key = {str(index): receipt for index, receipt in enumerate(held)}
        outcome = delete(
            self.client, held[0].url, [Settling(key, r.handle) for key, r in by_key.items()]
        )
        for receipt in by_key.values():
            self.receipts.drop(receipt.body.jid, receipt)
        self.counts.settled(held[0].queue, len(outcome.done))
        return [by_key[key].body.jid for key in outcome.done]

    def _release(self, command: checks.Settle) -> list[str]:
        held = self.receipts.held_of(command.jids, command.worker, command.queue)
        again: list[tuple[Body, int]] = []
        exhausted: list[Receipt] = []
        for receipt in held:
            body = receipt.body
            remaining = body.remaining - (1 if command.spend_retry else 0)
            if remaining < 0:
                exhausted.append(receipt)
                continue
            moved = body.again(remaining=remaining, released=body.released + 1)
            again.append(scheduled(moved, command.delay, command.now))
        sent = set(self.outbox.send_jobs(command.queue, again, "released jobs")) if again else set()
        if exhausted:  # tried once too often: failed, as a lock running out would fail them
            self.outbox.dead_letter_held(exhausted, None, None, command.worker, command.now)
        settled = [r for r in held if r.body.jid in sent or r in exhausted]
        deleted = set(self.delete_held(settled))
        return [jid for jid in command.jids if jid in deleted and jid in sent]

    def _fail(self, command: checks.Fail) -> None:
        held = self.receipts.held(command.jid, command.worker, "fail")
        if command.data is not None:
            held.body = held.body.again(data=command.data)
        self.outbox.dead_letter_held(
            [held], command.group, command.message, command.worker, command.now
        )
        self._on_message(held, "fail", "delete_message")
        self.receipts.drop(command.jid, held)

    def _retry(self, command: checks.Retry) -> int:
        held = self.receipts.held(command.jid, command.worker, "retry", command.queue)
        remaining = held.body.remaining - 1
        if remaining < 0:
            self.outbox.dead_letter_held(
                [held], command.group, command.message, command.worker, command.now
            )
        else:
            body = held.body.again(remaining=remaining, put=command.now)
            self.outbox.send_jobs(
                command.queue, [scheduled(body, command.delay, command.now)], "jobs"
            )
        self._on_message(held, "retry", "delete_message")
        self.receipts.drop(command.jid, held)
        return remaining

    # -- what SQS cannot do (Engine refuses these first: capabilities) --------------------
    def _cancel(self, command: checks.Jids) -> list[str]:
        raise Unsupported(self.name, "cancel", Capability.CANCEL.value)

    def _multiget(self, command: checks.Jids) -> list[Job]:
        raise Unsupported(self.name, "multiget", Capability.LOOKUP.value)

    def _jobs(self, command: checks.Listing) -> list[str]:
        raise Unsupported(self.name, "jobs", Capability.LISTING.value)

    def _failed_groups(self, now: float) -> dict[str, int]:
        raise Unsupported(self.name, "failed_groups", Capability.FAILURES.value)

    def _failed(self, command: checks.Page) -> JobPage:
        raise Unsupported(self.name, "failed", Capability.FAILURES.value)

    def _unfail(self, command: checks.Unfail) -> int:
        raise Unsupported(self.name, "unfail", Capability.FAILURES.value)

    # -- queues ---------------------------------------------------------------------------
    def _queues(self, now: float) -> list[QueueCounts]:
        """Every queue of the prefix, its counts reused for `counts_cache_sec` (counts.py)."""
        return [
            self.counts.fresh(name) or self.fetch_counts(name) for name in self.directory.names()
        ]

    def _queue_counts(self, command: checks.QueueAt) -> QueueCounts:
        return self.fetch_counts(command.queue)

    def fetch_counts(self, queue: str) -> QueueCounts:
        """SQS's counts of `queue` now (all 0 if it does not exist: nothing is created)."""
        info = self.directory.existing(queue)
        if info is None:
            return from_attributes(queue, {})
        try:
            reply = self.client.call(
                "get_queue_attributes", QueueUrl=info.url, AttributeNames=COUNT_ATTRIBUTES
            )
        except SQSRefused as error:
            if "NonExistent" not in error.code and "DoesNotExist" not in error.code:
                raise
            self.directory.forget(queue)
            return from_attributes(queue, {})
        counts = from_attributes(queue, reply.get("Attributes", {}))
        self.counts.store(counts)
        return counts

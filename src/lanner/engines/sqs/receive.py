"""Taking work from SQS: long polls, and the messages a pop settles itself instead of giving.

`pop` receives up to 10 messages a call (more calls for a larger count), long-polling
while it has nothing: SQS waits in whole seconds (WaitTimeSeconds, at most 20 a call), so
a wait is rounded to the nearest second, and at least one. The lock a receive takes is
the queue's VisibilityTimeout, which every process sees. Each message is then one of:

- a job to run: held (receipts.py) and given, `remaining` less one for each earlier
  delivery of the message (its ApproximateReceiveCount - 1: a lock that ran out, a worker
  that died, as qless counts a lock that ran out);
- a job whose budget that made negative: failed into `failed-retries-<queue>`, as qless's
  pop does;
- a job not due yet (a delay past SQS's 900 s): sent again, out of sight until it is due
  (or 900 s, then again), and not run;
- not a lanner job at all (not JSON, not our envelope, damaged): dead-lettered with group
  `lanner-not-a-job` and the reason, its text kept; the worker never sees it.

`Receiver` is given all it works with when the engine makes it: the client, the queue
directory, the counts cache (told what each receive found), the receipts it holds jobs
in, the outbox it sends again and dead-letters through, and the client's read timeout
(which a long poll must stay under).
"""

from __future__ import annotations

import time
from typing import Any, Final

from lanner import checks
from lanner.engines.sqs.batches import BATCH_LIMIT, MAX_DELAY, Settling, delete
from lanner.engines.sqs.connection import MAX_WAIT_SECONDS, SQSClient
from lanner.engines.sqs.counts import CountsCache
from lanner.engines.sqs.messages import NotAJob, decode, foreign_letter
from lanner.engines.sqs.outbox import Outbox
from lanner.engines.sqs.queues import QueueDirectory
from lanner.engines.sqs.receipts import Receipt, Receipts
from lanner.job import Job

DUE_TOLERANCE: Final = 1.0
"""A message received this close to its due time runs: SQS delays are whole seconds, and
its clock is not ours."""

NOT_A_JOB: Final = "lanner-not-a-job"
"""The failure group of a message that is not a lanner job."""


def wait_seconds(left: float, read_timeout: float) -> int:
    """SQS's WaitTimeSeconds for a wait of `left` seconds: 0 for none, else the nearest whole
    second, at least 1, at most 20 and less than the client's read timeout."""
    if left <= 0:
        return 0
    longest = max(0, min(MAX_WAIT_SECONDS, int(read_timeout) - 1))
    return min(longest, max(1, round(left)))


class Receiver:
    """Pops for the engine (see the module docstring); safe to share between threads."""

    def __init__(
        self,
        client: SQSClient,
        directory: QueueDirectory,
        counts: CountsCache,
        receipts: Receipts,
        outbox: Outbox,
        read_timeout: float,
    ) -> None:
        self.client = client
        self.directory = directory
        self.counts = counts
        self.receipts = receipts
        self.outbox = outbox
        self.read_timeout = read_timeout

    def pop(self, command: checks.Pop) -> list[Job]:
        info = self.directory.info(command.queue)
        deadline = time.monotonic() + command.wait
        jobs: list[Job] = []
        extra_rounds = -(-command.limit // BATCH_LIMIT)  # past the deadline: fill the count
        while True:
            wanted = min(BATCH_LIMIT, command.limit - len(jobs))
            left = deadline - time.monotonic()
            wait = 0 if jobs else wait_seconds(left, self.read_timeout)
            reply = self.client.call(
                "receive_message",
                QueueUrl=info.url,
                MaxNumberOfMessages=wanted,
                WaitTimeSeconds=wait,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
            messages: list[dict[str, Any]] = reply.get("Messages", [])
            self.counts.received(command.queue, len(messages), wanted)
            now = time.time() if command.now is None else command.now
            jobs += self._sort(command, info.url, info.lease, messages, now)
            if len(jobs) >= command.limit:
                return jobs
            if time.monotonic() >= deadline:
                extra_rounds -= 1
            if (
                len(messages) < wanted and (jobs or time.monotonic() >= deadline)
            ) or extra_rounds < 0:
                return jobs

    def _sort(
        self,
        command: checks.Pop,
        url: str,
        lease: int,
        messages: list[dict[str, Any]],
        now: float,
    ) -> list[Job]:
        """The jobs among received messages; the others are settled here (see the docstring)."""
        jobs: list[Job] = []
        late: list[Receipt] = []
        exhausted: list[Receipt] = []
        foreign: list[tuple[dict[str, Any], str]] = []
        for message in messages:
            try:
                body = decode(str(message.get("Body", "")))
            except NotAJob as why:
                foreign.append((message, str(why)))
                continue
            if body.queue != command.queue:  # moved here by hand (a redrive): it is this queue's
                body = body.again(queue=command.queue)
            deliveries = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
            body = body.again(remaining=body.remaining - max(0, deliveries - 1))
            receipt = Receipt(
                command.queue, url, str(message["ReceiptHandle"]), body, command.worker,
                now + lease, lease,
            )  # fmt: skip
            if body.due is not None and body.due > now + DUE_TOLERANCE:
                late.append(receipt)
            elif body.remaining < 0:
                exhausted.append(receipt)
            else:
                self.receipts.hold(receipt)
                jobs.append(body.job(command.worker, now, now + lease, body.remaining))
        if late:
            self._delay_again(command.queue, late, now)
        if exhausted:
            self.outbox.dead_letter_held(exhausted, None, None, command.worker, now)
            self._delete(url, exhausted)
        if foreign:
            self._dead_letter_foreign(command, url, foreign, now)
        return jobs

    def _delay_again(self, queue: str, late: list[Receipt], now: float) -> None:
        """Send not-yet-due jobs again, out of sight until due (or 900 s), then delete these."""
        entries = []
        for receipt in late:
            due = receipt.body.due or now
            delay = min(MAX_DELAY, max(0, round(due - now)))
            entries.append((receipt.body, delay))
        sent = set(self.outbox.send_jobs(queue, entries, "delayed jobs"))
        self._delete(late[0].url, [r for r in late if r.body.jid in sent])

    def _dead_letter_foreign(
        self,
        command: checks.Pop,
        url: str,
        foreign: list[tuple[dict[str, Any], str]],
        now: float,
    ) -> None:
        limit = self.directory.info(command.queue).max_message_bytes
        letters = []
        for message, why in foreign:
            message_id = message.get("MessageId", "?")
            failure = {
                "group": NOT_A_JOB,
                "message": f"SQS message {message_id} is not a lanner job: {why}",
                "when": now,
                "worker": command.worker,
            }
            letters.append(foreign_letter(str(message.get("Body", "")), failure, limit))
        self.outbox.send_dead_letters(command.queue, letters)
        delete(
            self.client,
            url,
            [Settling(str(i), str(m["ReceiptHandle"])) for i, (m, _) in enumerate(foreign)],
        )

    def _delete(self, url: str, held: list[Receipt]) -> None:
        if held:
            delete(self.client, url, [Settling(str(i), r.handle) for i, r in enumerate(held)])

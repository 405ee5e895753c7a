"""Sending to SQS what the engine's commands produce: jobs (with their delays) and dead letters.

put, complete (to a next queue), release, retry and a pop that finds a job not due yet all
send job bodies; fail, a spent retry budget and a message that is no lanner job send dead
letters. `Outbox` does both for the engine and for `Receiver` alike, in batches of 10
(batches.py), and tells the counts cache (counts.py) what it sent.

A delay is SQS's DelaySeconds, whole seconds up to 900; a longer one is carried in the
body (`due`) and the message is sent again, out of sight, until it is due (receive.py).
A job with a fair key is sent with its MessageGroupId (messages.py), every time.
"""

from __future__ import annotations

from lanner.engines.sqs.batches import MAX_DELAY, Outgoing, raise_unsent, send, whole_seconds_delay
from lanner.engines.sqs.connection import SQSClient
from lanner.engines.sqs.counts import CountsCache
from lanner.engines.sqs.messages import Body, dead_letter
from lanner.engines.sqs.queues import QueueDirectory
from lanner.engines.sqs.receipts import Receipt


def scheduled(body: Body, delay: float, now: float) -> tuple[Body, int]:
    """The body and DelaySeconds of a job due `delay` seconds from `now`: past SQS's
    900 s, the body carries when it is due and is sent again until then."""
    if delay > MAX_DELAY:
        return body.again(due=now + delay), MAX_DELAY
    return body.again(due=None), whole_seconds_delay(delay)


class Outbox:
    """Sends job bodies and dead letters to the queues of `directory`; `budget` is the
    bytes a batch call may carry (the engine's `max_message_bytes`)."""

    def __init__(
        self, client: SQSClient, directory: QueueDirectory, counts: CountsCache, budget: int
    ) -> None:
        self.client = client
        self.directory = directory
        self.counts = counts
        self.budget = budget

    def send_jobs(self, queue: str, entries: list[tuple[Body, int]], what: str) -> list[str]:
        """Send job bodies (each with its DelaySeconds) to `queue`; the jids sent."""
        url = self.directory.info(queue).url
        outgoing = [
            Outgoing(str(index), body.encoded(), delay, body.group)
            for index, (body, delay) in enumerate(entries)
        ]
        outcome = send(self.client, url, outgoing, self.budget)
        raise_unsent(outcome, what)
        delayed = sum(1 for _, delay in entries if delay)
        self.counts.sent(queue, len(entries) - delayed, delayed=False)
        self.counts.sent(queue, delayed, delayed=True)
        return [entries[int(key)][0].jid for key in outcome.done]

    def send_dead_letters(self, queue: str, letters: list[str]) -> None:
        """Send dead letters (encoded) to the dead-letter queue of `queue`."""
        url = self.directory.dlq_url(queue)
        outgoing = [Outgoing(str(index), text) for index, text in enumerate(letters)]
        raise_unsent(send(self.client, url, outgoing, self.budget), "dead letters")

    def dead_letter_held(
        self,
        held: list[Receipt],
        group: str | None,
        message: str | None,
        worker: str,
        now: float,
    ) -> None:
        """Send held jobs to their queue's dead-letter queue (the default group and
        message: retries exhausted). Their messages are deleted by the caller."""
        if not held:
            return
        queue = held[0].queue
        limit = self.directory.info(queue).max_message_bytes
        failure = {
            "group": group or f"failed-retries-{queue}",
            "message": message or f'Job exhausted retries in queue "{queue}"',
            "when": now,
            "worker": worker,
        }
        self.send_dead_letters(queue, [dead_letter(r.body, failure, limit) for r in held])

"""SQS's batch calls as the engine makes them: at most 10 entries and a size budget per call,
partial failures sorted into what to try again and what is lost for good.

SendMessageBatch, DeleteMessageBatch and ChangeMessageVisibilityBatch each take up to 10
entries, and a send's bodies must fit in the endpoint's request size. An entry can fail
while the rest succeed: a fault of SQS's (`SenderFault` false: throttling, an internal
error) is tried again once in the next call; a fault of the sender's (a stale receipt
handle: the lock was lost) is final and reported to the caller.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from lanner.engines.sqs.connection import SQSClient, SQSRefused

BATCH_LIMIT: Final = 10
"""SQS's most entries per batch call."""

MAX_DELAY: Final = 900
"""SQS's longest DelaySeconds."""


class Outgoing(NamedTuple):
    """One message to send: `key` names it in the outcome, `delay` in whole seconds,
    `group` its MessageGroupId (a fair queue's tenant; None: none)."""

    key: str
    body: str
    delay: int = 0
    group: str | None = None


class Settling(NamedTuple):
    """One received message to delete, or to change the visibility of."""

    key: str
    receipt: str
    visibility: int = 0  # change_visibility: seconds the message stays invisible from now


@dataclass
class Outcome:
    """Which entries of a batch call succeeded, and why the others failed (by key)."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # key -> SQS's code and message


def send(client: SQSClient, url: str, messages: Sequence[Outgoing], budget: int) -> Outcome:
    """Send `messages` to the queue at `url`, in calls of at most 10 and `budget` bytes."""
    outcome = Outcome()
    for chunk in _sized(messages, budget):
        entries: list[dict[str, Any]] = []
        for index, message in enumerate(chunk):
            entry: dict[str, Any] = {
                "Id": str(index), "MessageBody": message.body, "DelaySeconds": message.delay
            }  # fmt: skip
            if message.group is not None:
                entry["MessageGroupId"] = message.group
            entries.append(entry)
        _call(client, "send_message_batch", url, entries, [m.key for m in chunk], outcome)
    return outcome


def delete(client: SQSClient, url: str, messages: Sequence[Settling]) -> Outcome:
    """Delete received messages (a job completed, or moved on)."""
    return _settle(client, "delete_message_batch", url, messages, visibility=False)


def change_visibility(client: SQSClient, url: str, messages: Sequence[Settling]) -> Outcome:
    """Make received messages invisible for their `visibility` seconds from now (extend
    their locks)."""
    return _settle(client, "change_message_visibility_batch", url, messages, visibility=True)


def _settle(
    client: SQSClient, operation: str, url: str, messages: Sequence[Settling], visibility: bool
) -> Outcome:
    outcome = Outcome()
    for start in range(0, len(messages), BATCH_LIMIT):
        chunk = messages[start : start + BATCH_LIMIT]
        entries: list[dict[str, Any]] = [
            {"Id": str(index), "ReceiptHandle": message.receipt}
            for index, message in enumerate(chunk)
        ]
        if visibility:
            for entry, message in zip(entries, chunk, strict=True):
                entry["VisibilityTimeout"] = message.visibility
        _call(client, operation, url, entries, [m.key for m in chunk], outcome)
    return outcome


def whole_seconds_delay(seconds: float) -> int:
    """A delay as SQS takes it: whole seconds (rounded up: never early), at most 900."""
    whole = int(seconds)
    return min(MAX_DELAY, whole + (whole < seconds))


def _sized(messages: Sequence[Outgoing], budget: int) -> Iterator[list[Outgoing]]:
    chunk: list[Outgoing] = []
    size = 0
    for message in messages:
        length = len(message.body)
        if chunk and (len(chunk) == BATCH_LIMIT or size + length > budget):
            yield chunk
            chunk, size = [], 0
        chunk.append(message)
        size += length
    if chunk:
        yield chunk


def _call(
    client: SQSClient,
    operation: str,
    url: str,
    entries: list[dict[str, Any]],
    keys: list[str],
    outcome: Outcome,
) -> None:
    """One batch call, and once more for the entries SQS failed by its own fault."""
    pending = entries
    for attempt in range(2):
        reply = client.call(operation, QueueUrl=url, Entries=pending)
        retry: list[dict[str, Any]] = []
        outcome.done += [keys[int(entry["Id"])] for entry in reply.get("Successful", [])]
        by_id = {entry["Id"]: entry for entry in pending}
        for failure in reply.get("Failed", []):
            reason = f"{failure.get('Code', '')}: {failure.get('Message', '')}"
            if failure.get("SenderFault") or attempt == 1:
                outcome.failed[keys[int(failure["Id"])]] = reason
            else:
                retry.append(by_id[failure["Id"]])
        if not retry:
            return
        pending = retry


def raise_unsent(outcome: Outcome, what: str) -> None:
    """Raise `SQSRefused` if some message of a send failed (the others were sent)."""
    if outcome.failed:
        first_key, reason = next(iter(outcome.failed.items()))
        code, _, message = reason.partition(": ")
        raise SQSRefused(
            "send_message_batch",
            code,
            f"{len(outcome.failed)} of the {what} not sent (first: {first_key}: {message}); "
            f"{len(outcome.done)} sent",
        )

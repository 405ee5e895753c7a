"""The SQS queues behind lanner's queues: their names, URLs and attributes, made on first use.

A lanner queue `<name>` is the SQS queue `<prefix><name>`, its dead-letter queue
`<dlq_prefix><prefix><name>`. Names are checked against SQS's rule (1 to 80 letters,
digits, '-' and '_', the prefixes included) before any request, and never rewritten. A
queue is created the first time a command needs it, with the attributes of
`QueueDirectory.CREATED_WITH`; its URL, lock (VisibilityTimeout) and MaximumMessageSize
are then kept by the engine (each process asks once, then again after ATTRIBUTES_TTL), so
that a command costs only its own request. Commands that only look (counts) never create.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Final

from lanner.checks.names import queue_name
from lanner.engines.sqs.connection import (
    SQS_NAME_LIMIT,
    QueueMissing,
    SQSClient,
    SQSOptions,
    SQSRefused,
)
from lanner.errors import InvalidName

RETENTION_SEC: Final = 1_209_600
"""SQS's longest MessageRetentionPeriod (14 days), given to every queue the engine creates:
SQS's default (4 days) would silently drop a job that waits longer."""

ATTRIBUTES_TTL: Final = 60.0
"""Seconds a queue's lock and size limit are reused before being read again (another
process may have changed the lock)."""

LISTING_TTL: Final = 30.0
"""Seconds the list of queues (ListQueues) is reused; queues this process uses join it at once."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """What the engine keeps of one SQS queue."""

    url: str
    lease: int  # VisibilityTimeout: the lock a receive takes, seconds
    max_message_bytes: int  # MaximumMessageSize
    read_at: float  # time.monotonic() of the attributes' reading


class QueueDirectory:
    """The SQS queues of one engine, by lanner queue name."""

    def __init__(self, client: SQSClient, options: SQSOptions) -> None:
        self._client = client
        self._options = options
        self._known: dict[str, QueueInfo] = {}  # lanner queue name -> info
        self._dlq_urls: dict[str, str] = {}
        self._listed: tuple[float, frozenset[str]] = (-LISTING_TTL, frozenset())
        self._lock = threading.Lock()

    # -- names ----------------------------------------------------------------------------
    def sqs_name(self, queue: str) -> str:
        """The SQS queue of lanner queue `queue` (InvalidName if SQS cannot have it)."""
        self.dlq_name(queue)  # the longer of the two: checks both
        return self._options.prefix + queue

    def dlq_name(self, queue: str) -> str:
        name = self._options.dlq_prefix + self._options.prefix + queue_name(queue)
        if len(name) > SQS_NAME_LIMIT:
            raise InvalidName(
                f"queue {queue!r} is too long for SQS with this engine's prefixes: its "
                f"dead-letter queue {name!r} has {len(name)} characters, SQS allows "
                f"{SQS_NAME_LIMIT}"
            )
        if (self._options.prefix + queue).startswith(self._options.dlq_prefix):
            raise InvalidName(
                f"queue {queue!r}: its SQS name starts with {self._options.dlq_prefix!r}, "
                "which names dead-letter queues here; choose another name or prefix"
            )
        return name

    def lanner_name(self, sqs_name: str) -> str | None:
        """The lanner queue an SQS queue is, or None if it is none of this engine's."""
        prefix = self._options.prefix
        if not sqs_name.startswith(prefix) or sqs_name.startswith(self._options.dlq_prefix):
            return None
        name = sqs_name[len(prefix) :]
        try:
            self.sqs_name(name)
        except InvalidName:
            return None
        return name

    # -- URLs and attributes --------------------------------------------------------------
    def info(self, queue: str) -> QueueInfo:
        """The queue's URL and attributes, creating the queue if it does not exist."""
        known = self._known.get(queue)
        if known is not None and time.monotonic() - known.read_at < ATTRIBUTES_TTL:
            return known
        name = self.sqs_name(queue)
        url = known.url if known is not None else self._find(name)
        if url is None:
            url = self._create(name, self._attributes())
        try:
            return self._read(queue, url)
        except QueueMissing:  # deleted since: made again
            self.forget(queue)
            return self._read(queue, self._create(name, self._attributes()))

    def existing(self, queue: str) -> QueueInfo | None:
        """The queue's URL and attributes if it exists (nothing is created)."""
        known = self._known.get(queue)
        if known is not None and time.monotonic() - known.read_at < ATTRIBUTES_TTL:
            return known
        url = known.url if known is not None else self._find(self.sqs_name(queue))
        if url is None:
            return None
        try:
            return self._read(queue, url)
        except QueueMissing:
            self.forget(queue)
            return None

    def dlq_url(self, queue: str) -> str:
        """The URL of the queue's dead-letter queue, creating it if it does not exist."""
        url = self._dlq_urls.get(queue)
        if url is None:
            name = self.dlq_name(queue)
            size = self.info(queue).max_message_bytes
            url = self._find(name) or self._create(name, self._attributes(size))
            self._dlq_urls[queue] = url
        return url

    def forget(self, queue: str) -> None:
        """Drop what is kept of a queue (it was deleted, or its lock changed)."""
        self._known.pop(queue, None)
        self._dlq_urls.pop(queue, None)

    def set_lease(self, queue: str, seconds: int) -> None:
        """Set the queue's VisibilityTimeout (creating the queue if need be)."""
        info = self.info(queue)
        self._client.call(
            "set_queue_attributes",
            QueueUrl=info.url,
            Attributes={"VisibilityTimeout": str(seconds)},
        )
        with self._lock:
            self._known[queue] = QueueInfo(
                info.url, seconds, info.max_message_bytes, time.monotonic()
            )

    def fresh_lease(self, queue: str) -> int | None:
        """The queue's lock as SQS has it now, or None if the queue does not exist."""
        self.forget_attributes(queue)
        info = self.existing(queue)
        return None if info is None else info.lease

    def forget_attributes(self, queue: str) -> None:
        known = self._known.get(queue)
        if known is not None:
            with self._lock:
                self._known[queue] = QueueInfo(
                    known.url, known.lease, known.max_message_bytes, -ATTRIBUTES_TTL
                )

    # -- listing --------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every lanner queue of this engine's prefix: SQS's list (reused for LISTING_TTL),
        with the queues this process knows (SQS lists a new queue only after a while)."""
        listed_at, listed = self._listed
        if time.monotonic() - listed_at >= LISTING_TTL:
            listed = frozenset(self._list())
            self._listed = (time.monotonic(), listed)
        return sorted(listed | set(self._known))

    def _list(self) -> list[str]:
        found: list[str] = []
        arguments: dict[str, object] = {"MaxResults": 1000}
        if self._options.prefix:
            arguments["QueueNamePrefix"] = self._options.prefix
        while True:
            reply = self._client.call("list_queues", **arguments)
            for url in reply.get("QueueUrls", []):
                name = self.lanner_name(str(url).rpartition("/")[2])
                if name is not None:
                    found.append(name)
            token = reply.get("NextToken")
            if not token:
                return found
            arguments["NextToken"] = token

    # -- requests -------------------------------------------------------------------------
    def _attributes(self, max_message_bytes: int | None = None) -> dict[str, str]:
        return {
            "VisibilityTimeout": str(self._options.visibility_timeout),
            "MaximumMessageSize": str(max_message_bytes or self._options.max_message_bytes),
            "MessageRetentionPeriod": str(RETENTION_SEC),
        }

    def _find(self, name: str) -> str | None:
        try:
            reply = self._client.call("get_queue_url", QueueName=name)
        except QueueMissing:
            return None
        return str(reply["QueueUrl"])

    def _create(self, name: str, attributes: dict[str, str]) -> str:
        try:
            reply = self._client.call("create_queue", QueueName=name, Attributes=attributes)
        except SQSRefused as error:
            # Made meanwhile by another process, whose lock may already differ from ours.
            url = self._find(name) if "Exist" in error.code else None
            if url is None:
                raise
            return url
        return str(reply["QueueUrl"])

    def _read(self, queue: str, url: str) -> QueueInfo:
        reply = self._client.call(
            "get_queue_attributes",
            QueueUrl=url,
            AttributeNames=["VisibilityTimeout", "MaximumMessageSize"],
        )
        attributes = reply.get("Attributes", {})
        info = QueueInfo(
            url,
            int(attributes.get("VisibilityTimeout", self._options.visibility_timeout)),
            int(attributes.get("MaximumMessageSize", self._options.max_message_bytes)),
            time.monotonic(),
        )
        with self._lock:
            self._known[queue] = info
        return info

"""Fixtures of the SQS engine's own tests: an engine on a fresh prefix of moto's server
(tests/conftest.py's `sqs_fresh_url`), and boto3 beside it to look at SQS directly."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import lanner
from lanner.engines.sqs.connection import parse_url
from lanner.engines.sqs.engine import SQSEngine


@pytest.fixture
def engine(sqs_fresh_url: str) -> Iterator[SQSEngine]:
    opened = lanner.open_engine(sqs_fresh_url)
    assert isinstance(opened, SQSEngine)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def connect(sqs_fresh_url: str) -> Iterator[Callable[[], SQSEngine]]:
    """More engines on the same prefix (other workers, as another process would have)."""
    opened: list[SQSEngine] = []

    def open_one() -> SQSEngine:
        made = lanner.open_engine(sqs_fresh_url)
        assert isinstance(made, SQSEngine)
        opened.append(made)
        return made

    yield open_one
    for made in opened:
        made.close()


class Raw:
    """boto3's own SQS client on the test's prefix: what someone else would send or see."""

    def __init__(self, url: str) -> None:
        import boto3

        region, options = parse_url(url)
        self.prefix, self.dlq_prefix = options.prefix, options.dlq_prefix
        self.client: Any = boto3.client(
            "sqs", region_name=region, endpoint_url=options.endpoint_url
        )

    def url(self, sqs_name: str) -> str:
        return str(self.client.get_queue_url(QueueName=sqs_name)["QueueUrl"])

    def send(self, queue: str, body: str, delay: int = 0) -> None:
        url = self.client.create_queue(QueueName=self.prefix + queue)["QueueUrl"]
        self.client.send_message(QueueUrl=url, MessageBody=body, DelaySeconds=delay)

    def dead_letters(self, queue: str, count: int = 10) -> list[dict[str, Any]]:
        """The dead letters of a queue (received with no lock: they stay there)."""
        try:
            url = self.url(self.dlq_prefix + self.prefix + queue)
        except self.client.exceptions.QueueDoesNotExist:
            return []
        reply = self.client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=count, VisibilityTimeout=0
        )
        return [json.loads(m["Body"]) for m in reply.get("Messages", [])]

    def attributes(self, sqs_name: str) -> dict[str, str]:
        url = self.url(sqs_name)
        reply = self.client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
        return dict(reply["Attributes"])


@pytest.fixture
def raw(sqs_fresh_url: str) -> Raw:
    return Raw(sqs_fresh_url)

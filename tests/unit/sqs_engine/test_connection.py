"""sqs:// URLs, the SQS engine's options, and what it needs installed (no server needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lanner import MalformedArgument
from lanner.engines.sqs.connection import SQSOptions, impatient, parse_url


def test_a_url_gives_the_region_and_the_options() -> None:
    region, options = parse_url(
        "sqs://eu-west-1?endpoint_url=http://127.0.0.1:9324&prefix=app-v2-&visibility_timeout=30"
    )
    assert region == "eu-west-1"
    assert options == SQSOptions(
        endpoint_url="http://127.0.0.1:9324", prefix="app-v2-", visibility_timeout=30
    )
    assert options.dlq_prefix == "dlq-"  # Kale's


def test_a_url_without_a_region_leaves_it_to_boto3() -> None:
    assert parse_url("sqs://") == ("", SQSOptions())


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqs://key:secret@eu-west-1", "never from the URL"),
        ("sqs://eu-west-1/queue", "sqs://REGION"),
        ("sqs://EU_WEST?", "region"),
        ("sqs://eu-west-1?colour=blue", "unknown SQS option"),
        ("sqs://eu-west-1?visibility_timeout=soon", "not a number"),
        ("sqs://eu-west-1?visibility_timeout=50000", "0 to 43200"),
        ("sqs://eu-west-1?max_message_bytes=100", "1024 to 1048576"),
        ("sqs://eu-west-1?endpoint_url=localhost:9324", "http://"),
        ("sqs://eu-west-1?read_timeout=0", "read_timeout"),
        ("redis://localhost", "not an SQS URL"),
    ],
)
def test_a_bad_url_says_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(MalformedArgument, match=says):
        parse_url(url)


def test_an_impatient_engine_does_not_retry_or_wait_long() -> None:
    options = impatient(SQSOptions(), 0.2)
    assert (options.retries, options.connect_timeout, options.read_timeout) == (0, 0.2, 0.2)


def test_without_boto3_the_engine_says_to_install_lanner_sqs() -> None:
    code = (
        "import sys; sys.modules['boto3'] = None\n"
        "import lanner\n"
        "try:\n"
        "    lanner.open_engine('sqs://eu-west-1')\n"
        "except lanner.ConfigError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'lanner[sqs]'" in done.stdout

"""Credentials SQS denies are a configuration to fix (`StoreMisconfigured`), not an outage."""

from __future__ import annotations

import pickle

import pytest

import lanner
from lanner import EngineUnavailable, StoreMisconfigured
from lanner.engines.sqs.connection import SQSDenied


def test_credentials_sqs_denies_are_misconfigured_not_an_outage(sqs_denying_url: str) -> None:
    with (
        lanner.open_engine(sqs_denying_url) as engine,
        pytest.raises(StoreMisconfigured, match="InvalidClientTokenId") as refused,
    ):
        engine.put("q", "j1", "Task")
    assert not isinstance(refused.value, EngineUnavailable)  # workers must not wait on it
    said = str(refused.value)
    assert "\n" not in said  # one line: the code and message of moto's XML body
    assert "<" not in said
    assert "give lanner credentials that SQS accepts" in said
    copy = pickle.loads(pickle.dumps(refused.value))  # as a worker tells its supervisor
    assert isinstance(refused.value, SQSDenied)
    assert isinstance(copy, SQSDenied)
    assert (str(copy), copy.code) == (said, refused.value.code)

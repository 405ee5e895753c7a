"""Payloads: JSON by default, signed pickle only on purpose, and clear errors."""

import datetime
import json

import pytest

from lanner.codec import (
    JobIdentity,
    JSONCodec,
    Payload,
    SignedPickleCodec,
    decode,
)
from lanner.errors import ArgumentError, BadSignature, DecodeError

JOB = JobIdentity("jid-1", "app.tasks.send", "emails")
KEY = b"k" * 32


def test_json_round_trip() -> None:
    payload = Payload((1, "two", [3]), {"four": {"five": None}}, app_data={"env": "prod"})
    data = JSONCodec().encode(payload, JOB)
    assert json.loads(data) == {
        "v": 1,
        "args": [1, "two", [3]],
        "kwargs": {"four": {"five": None}},
        "app_data": {"env": "prod"},
    }
    assert decode(data, JOB) == Payload((1, "two", [3]), {"four": {"five": None}}, {"env": "prod"})


def test_empty_kwargs_and_null_app_data_are_left_out_and_read_back() -> None:
    data = JSONCodec().encode(Payload((1,), {}, app_data=None), JOB)
    assert data == '{"v":1,"args":[1]}'
    assert decode(data, JOB) == Payload((1,), {}, None)
    # What earlier versions wrote still reads the same.
    assert decode('{"v":1,"args":[1],"kwargs":{},"app_data":null}', JOB) == decode(data, JOB)


def test_a_non_json_argument_is_named() -> None:
    payload = Payload((1, datetime.date(2026, 1, 1)), {})
    with pytest.raises(ArgumentError, match=r"app\.tasks\.send: argument 1 \(date\)"):
        JSONCodec().encode(payload, JOB)


def test_a_non_json_keyword_argument_is_named() -> None:
    with pytest.raises(ArgumentError, match="keyword argument 'when'"):
        JSONCodec().encode(Payload((), {"when": {1, 2}}), JOB)


def test_nan_is_not_json() -> None:
    with pytest.raises(ArgumentError, match="argument 0"):
        JSONCodec().encode(Payload((float("nan"),), {}), JOB)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not an envelope"),
        ('{"v": 99}', "unknown envelope version"),
        ('{"v": 1, "codec": "yaml"}', "unknown codec"),
        ('{"v": 1, "args": {}, "kwargs": {}}', "args must be a list"),
    ],
)
def test_undecodable_data_says_why(data: str, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as caught:
        decode(data, JOB)
    assert caught.value.group == "lanner-undecodable"


def test_signed_pickle_round_trip_carries_any_object() -> None:
    codec = SignedPickleCodec(KEY)
    when = datetime.date(2026, 1, 1)
    data = codec.encode(Payload((when,), {"n": 1}), JOB)
    assert decode(data, JOB, codec) == Payload((when,), {"n": 1}, None)


def test_pickle_needs_a_real_key() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        SignedPickleCodec(b"short")


def test_pickle_payload_is_refused_by_a_worker_without_a_key() -> None:
    data = SignedPickleCodec(KEY).encode(Payload((1,), {}), JOB)
    with pytest.raises(BadSignature) as caught:
        decode(data, JOB)
    assert caught.value.group == "lanner-bad-signature"


def test_a_tampered_payload_is_never_unpickled() -> None:
    codec = SignedPickleCodec(KEY)
    envelope = json.loads(codec.encode(Payload((1,), {}), JOB))
    envelope["body"] = SignedPickleCodec(b"x" * 32).encode(Payload((2,), {}), JOB)
    with pytest.raises(BadSignature, match="does not match"):
        decode(json.dumps(envelope), JOB, codec)


def test_a_signed_payload_cannot_be_replayed_into_another_job_or_queue() -> None:
    codec = SignedPickleCodec(KEY)
    data = codec.encode(Payload((1,), {}), JOB)
    for other in (
        JobIdentity("jid-2", JOB.klass, JOB.queue),
        JobIdentity(JOB.jid, JOB.klass, "other"),
        JobIdentity(JOB.jid, "app.tasks.other", JOB.queue),
    ):
        with pytest.raises(BadSignature):
            decode(data, other, codec)


def test_a_wrong_key_is_a_bad_signature() -> None:
    data = SignedPickleCodec(KEY).encode(Payload((1,), {}), JOB)
    with pytest.raises(BadSignature):
        decode(data, JOB, SignedPickleCodec(b"z" * 32))


def test_arguments_nested_too_deeply_for_json_are_an_argument_error() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ArgumentError, match="nested too deeply"):
        JSONCodec().encode(Payload((deep,)), JOB)


def test_data_nested_too_deeply_to_decode_is_a_decode_error() -> None:
    data = '{"v": 1, "args": [' + "[" * 100_000 + "]" * 100_000 + "]}"
    with pytest.raises(DecodeError, match="JSON that can be read"):
        decode(data, JOB)


def test_a_workflow_object_travels_in_both_envelopes_and_is_signed() -> None:
    from lanner.codec import JobIdentity, Payload, SignedPickleCodec, decode

    job = JobIdentity("j1", "t.Task", "q")
    workflow = {"id": "w", "in": ["a", ["b", "c"]]}
    signed = SignedPickleCodec(b"k" * 32)
    for codec in (JSONCodec(), signed):
        data = codec.encode(Payload((1,), {}, None, workflow=workflow), job)
        assert decode(data, job, signed).workflow == workflow
    tampered = signed.encode(Payload((1,), {}, None, workflow=workflow), job).replace('"w"', '"x"')
    with pytest.raises(BadSignature):
        decode(tampered, job, signed)

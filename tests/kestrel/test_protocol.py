"""The request parser: Kestrel's get options and their combinations, set's expiry rule."""

from __future__ import annotations

import base64
import json

import pytest

from lanner.kestrel.items import from_data, to_data
from lanner.kestrel.protocol import Get, ProtocolError, QueueCommand, Set, Simple, parse

NOW = 1_700_000_000.0


def test_get_options_in_any_order() -> None:
    (get,) = parse(b"get work/t=500/close/open", NOW)
    assert get == Get("work/t=500/close/open", "work", 0.5, True, True, False, False)
    (same,) = parse(b"GET work/open/close/t=500", NOW)
    assert isinstance(same, Get)
    assert (same.open, same.close, same.timeout) == (True, True, 0.5)


def test_a_multi_key_get_is_one_command_per_key() -> None:
    assert [c.queue for c in parse(b"get a b/peek", NOW) if isinstance(c, Get)] == ["a", "b"]


@pytest.mark.parametrize(
    "line",
    [b"get work/peek/open", b"get work/peek/abort", b"get work/abort/close", b"get work/open/abort",
     b"get work/t=abc", b"get work/t=-1", b"get work/later", b"get"],
)  # fmt: skip
def test_bad_get_options_are_client_errors_that_close(line: bytes) -> None:
    with pytest.raises(ProtocolError) as raised:
        parse(line, NOW)
    assert raised.value.reply.startswith(b"CLIENT_ERROR")
    assert raised.value.close


@pytest.mark.parametrize(
    ("expiry", "expected"),
    [(0, None), (30, NOW + 30), (999_999, NOW + 999_999), (1_000_000, 1_000_000.0),
     (1_800_000_000, 1_800_000_000.0), (-1, NOW - 1)],
)  # fmt: skip
def test_set_expiry_is_relative_below_a_million_seconds(
    expiry: int, expected: float | None
) -> None:
    (command,) = parse(b"set work 0 %d 5" % expiry, NOW)
    assert command == Set("work", expected, 5, False)


def test_set_noreply() -> None:
    assert parse(b"set work 7 0 5 noreply", NOW) == [Set("work", None, 5, True)]


def test_a_set_with_a_bad_queue_name_drops_its_data_block() -> None:
    with pytest.raises(ProtocolError) as raised:
        parse(b"set bad.name 0 0 5", NOW)
    assert raised.value.skip == 7
    assert not raised.value.close


@pytest.mark.parametrize("line", [b"set work 0 0", b"set work 0 0 x", b"set work 0 0 -1"])
def test_malformed_sets_close_the_connection(line: bytes) -> None:
    with pytest.raises(ProtocolError) as raised:
        parse(line, NOW)
    assert raised.value.close


def test_the_other_commands() -> None:
    assert parse(b"delete work", NOW) == [QueueCommand("delete", "work")]
    assert parse(b"flush work noreply", NOW) == [QueueCommand("flush", "work", noreply=True)]
    assert parse(b"confirm work 3", NOW) == [QueueCommand("confirm", "work", 3)]
    assert parse(b"flush_all", NOW) == [Simple("flush_all")]
    assert parse(b"version", NOW) == [Simple("version")]


@pytest.mark.parametrize("line", [b"", b"frobnicate", b"incr work 1", b"cas work 0 0 1 1"])
def test_unknown_commands_are_error(line: bytes) -> None:
    with pytest.raises(ProtocolError) as raised:
        parse(line, NOW)
    assert raised.value.reply == b"ERROR\r\n"


@pytest.mark.parametrize(
    "value", [b"text", "ünïcode".encode(), b"\xff\xfe\x00", b"", b'"quoted"', b"{}"]
)
def test_values_survive_being_kept_as_job_data(value: bytes) -> None:
    assert from_data(to_data(value)) == value


def test_values_are_kept_as_json_would_keep_them() -> None:
    """The shortcut for plain ASCII text writes and reads exactly what `json` does, for
    every byte alone and beside text (quotes, backslashes, control characters, DEL)."""
    values = [bytes([n]) for n in range(256)] + [b"a%cz" % n for n in range(128)]
    for value in values:
        data = to_data(value)
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            assert json.loads(data) == {"base64": base64.b64encode(value).decode()}
        else:
            assert data == json.dumps(text, ensure_ascii=False)
        assert from_data(data) == value
    assert from_data('"a" ') == b"a"  # JSON with space after: read by json, as before
    assert from_data('"say \\"hi\\""') == b'say "hi"'


def test_a_key_parsed_again_gives_the_same_get() -> None:
    first, again = parse(b"get work/t=5", NOW), parse(b"get work/t=5", NOW)
    assert first == again == [Get("work/t=5", "work", 0.005, False, False, False, False)]
    with pytest.raises(ProtocolError):  # a bad key is refused every time, never remembered
        parse(b"get bad.name", NOW)
    with pytest.raises(ProtocolError):
        parse(b"get bad.name", NOW)

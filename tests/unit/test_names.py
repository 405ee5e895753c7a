"""The one naming rule, and the argument checks every engine shares."""

import math

import pytest

from lanner import InvalidName, MalformedArgument, PayloadTooLarge, names


@pytest.mark.parametrize("name", ["a", "default", "high-priority", "q_1", "A" + "b" * 63])
def test_valid_queue_names_are_returned_unchanged(name: str) -> None:
    assert names.queue_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "1abc", "-a", "_a", "a b", "a.b", "a:b", "a*", "a/b", "ä", "a" * 65, "a\n"]
)
def test_invalid_queue_names_are_rejected_not_rewritten(name: str) -> None:
    with pytest.raises(InvalidName, match="invalid queue name"):
        names.queue_name(name)


def test_queue_name_must_be_a_str() -> None:
    with pytest.raises(InvalidName, match="must be a str"):
        names.queue_name(b"abc")


@pytest.mark.parametrize("value", ["", "a\x00b", "x" * 257, "tab\there"])
def test_labels_reject_empty_long_and_control_characters(value: str) -> None:
    with pytest.raises(InvalidName):
        names.label(value, "jid")


def test_labels_accept_any_printable_text() -> None:
    assert names.label("host-1:42/ä é", "worker") == "host-1:42/ä é"


def test_a_str_is_not_a_list_of_labels() -> None:
    with pytest.raises(MalformedArgument, match="list of str"):
        names.labels("abc", "tags")


def test_unique_labels_keep_first_seen_order() -> None:
    assert names.unique_labels(["b", "a", "b"], "tags") == ["b", "a"]


@pytest.mark.parametrize("value", [True, 1.5, "3", None])
def test_integer_rejects_non_ints_including_bool(value: object) -> None:
    with pytest.raises(MalformedArgument, match="must be an int"):
        names.integer(value, "priority")


def test_integer_minimum() -> None:
    with pytest.raises(MalformedArgument, match=">= 1"):
        names.integer(0, "count", 1)


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "1", True])
def test_seconds_must_be_finite_and_non_negative(value: object) -> None:
    with pytest.raises(MalformedArgument):
        names.seconds(value, "delay")


def test_json_text_checks_type_syntax_and_size() -> None:
    assert names.json_text('{"a": 1}', "data", 100) == '{"a": 1}'
    with pytest.raises(MalformedArgument, match="not valid JSON"):
        names.json_text("{", "data", 100)
    with pytest.raises(MalformedArgument, match="NaN is not JSON"):
        names.json_text('{"a": NaN}', "data", 100)
    with pytest.raises(MalformedArgument, match="JSON text"):
        names.json_text({"a": 1}, "data", 100)
    with pytest.raises(PayloadTooLarge, match="10 bytes"):
        names.json_text('"' + "é" * 4 + '"', "data", 9)

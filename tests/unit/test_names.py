"""The one naming rule: queue names, and the labels programs choose."""

import pytest

from lanner import InvalidName, MalformedArgument
from lanner.checks import names


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

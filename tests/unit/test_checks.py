"""The argument checks of engine commands (`lanner.checks`): values, and whole commands."""

import math

import pytest

from lanner import checks
from lanner.checks import values
from lanner.errors import InvalidName, MalformedArgument, PayloadTooLarge
from lanner.records import NewJob


@pytest.mark.parametrize("value", [True, 1.5, "3", None])
def test_integer_rejects_non_ints_including_bool(value: object) -> None:
    with pytest.raises(MalformedArgument, match="must be an int"):
        values.integer(value, "priority")


def test_integer_minimum() -> None:
    with pytest.raises(MalformedArgument, match=">= 1"):
        values.integer(0, "count", 1)


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "1", True])
def test_seconds_must_be_finite_and_non_negative(value: object) -> None:
    with pytest.raises(MalformedArgument):
        values.seconds(value, "delay")


def test_json_text_checks_type_syntax_and_size() -> None:
    assert values.json_text('{"a": 1}', "data", 100) == '{"a": 1}'
    with pytest.raises(MalformedArgument, match="not valid JSON"):
        values.json_text("{", "data", 100)
    with pytest.raises(MalformedArgument, match="NaN is not JSON"):
        values.json_text('{"a": NaN}', "data", 100)
    with pytest.raises(MalformedArgument, match="JSON text"):
        values.json_text({"a": 1}, "data", 100)
    with pytest.raises(PayloadTooLarge, match="10 bytes"):
        values.json_text('"' + "é" * 4 + '"', "data", 9)


def test_a_put_record_carries_every_checked_job_with_who_and_when() -> None:
    given = NewJob("q", "j", "K", "{}", 1, None, ["t", "t"], 2, None)
    record = checks.put(given, "", 5.0, 100)
    assert record == checks.Put([NewJob("q", "j", "K", "{}", 1.0, None, ["t"], 2, None)], "", 5.0)


def test_put_many_takes_only_new_jobs() -> None:
    with pytest.raises(MalformedArgument, match="NewJob"):
        checks.put_many([("q", "j", "K")], None, 100)
    with pytest.raises(MalformedArgument, match="list of NewJob"):
        checks.put_many(NewJob("q", "j", "K"), None, 100)


def test_a_pop_keeps_the_clock_when_no_now_is_given() -> None:
    assert checks.pop("q", "w", 3, 0.5, None) == checks.Pop("q", "w", 3, 0.5, None)
    assert checks.pop("q", "w", 3, 0, 7).now == 7.0
    with pytest.raises(InvalidName):
        checks.pop("1q", "w", 1, 0, None)


def test_complete_refuses_a_delay_or_dependencies_without_a_next_queue() -> None:
    with pytest.raises(MalformedArgument, match="need a next queue"):
        checks.complete("j", "w", "q", None, None, 5, None, None, None, 100)
    advanced = checks.complete("j", "w", "q", None, "q2", 5, ["a", "a"], None, 1.0, 100)
    assert (advanced.next, advanced.delay, advanced.depends) == ("q2", 5.0, ["a"])


def test_a_listing_needs_a_queue_except_for_complete_jobs() -> None:
    assert checks.listing("complete", None, 0, 5, 1.0).queue is None
    with pytest.raises(MalformedArgument, match="needs a queue"):
        checks.listing("waiting", None, 0, 5, 1.0)
    with pytest.raises(MalformedArgument, match="unknown state"):
        checks.listing("finished", "q", 0, 5, 1.0)


@pytest.mark.parametrize("value", [math.inf, math.nan, True, None, [1]])
def test_config_values_are_finite_str_int_or_float(value: object) -> None:
    with pytest.raises(MalformedArgument):
        checks.config_set("key", value)


def test_log_details_must_be_json_and_never_replace_what_or_when() -> None:
    record = checks.log("j", "note", {"what": "x", "when": 1, "n": 2}, 3.0)
    assert record.details == {"n": 2}
    with pytest.raises(MalformedArgument, match="JSON"):
        checks.log("j", "note", {"n": math.nan}, 3.0)


def test_recur_update_names_unknown_fields() -> None:
    with pytest.raises(MalformedArgument, match="colour"):
        checks.recur_update("r", {"colour": "red"}, None, 100)
    assert checks.recur_update("r", {"interval": 5}, 1.0, 100).changes == {"interval": 5.0}

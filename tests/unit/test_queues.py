"""Tests of `lanner.queues`: QueueConfig, the queue config YAML, and `-Q` queue lists."""

from __future__ import annotations

import dataclasses
import math
import pickle
import re
from pathlib import Path

import pytest

from lanner.errors import ConfigError, MalformedArgument
from lanner.queues import (
    DEFAULT_QUEUES,
    QueueConfig,
    load_queue_config,
    queues_from_names,
)

# Kale's example/taskworker/queue_config.yaml.
KALE_EXAMPLE = """\
high_priority:
  name: high_priority
  priority: 100
  batch_size: 10
  visibility_timeout_sec: 60
  long_poll_time_sec: 1
  num_iterations: 10

default:
  name: default
  priority: 40
  batch_size: 10
  visibility_timeout_sec: 60
  long_poll_time_sec: 1
  num_iterations: 5

low_priority:
  name: low_priority
  priority: 5
  batch_size: 10
  visibility_timeout_sec: 60
  long_poll_time_sec: 5
  num_iterations: 5
"""


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path, so that messages name `queues.yaml` as given."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(directory: Path, text: str, name: str = "queues.yaml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(text: str) -> str:
    """The message of loading `text` as ./queues.yaml (requires the `in_tmp` fixture)."""
    Path("queues.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_queue_config("queues.yaml")
    return str(caught.value)


# -- QueueConfig ---------------------------------------------------------------------------


def test_defaults_for_programmatic_construction() -> None:
    queue = QueueConfig("emails")
    assert queue == QueueConfig(
        name="emails",
        priority=1,
        batch_size=10,
        visibility_timeout_sec=300.0,
        long_poll_time_sec=1.0,
        num_iterations=10,
        max_concurrency=None,
        retries=None,
    )


def test_seconds_are_stored_as_float() -> None:
    queue = QueueConfig("q", visibility_timeout_sec=30, long_poll_time_sec=0)
    assert type(queue.visibility_timeout_sec) is float
    assert type(queue.long_poll_time_sec) is float
    assert queue.long_poll_time_sec == 0.0


def test_queue_config_is_frozen() -> None:
    queue = QueueConfig("q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        queue.priority = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("priority", 0, "priority must be an int >= 1, not 0"),
        ("priority", True, "priority must be an int >= 1, not True"),
        ("priority", 2.0, "priority must be an int >= 1, not 2.0"),
        ("batch_size", "10", "batch_size must be an int >= 1, not '10'"),
        ("num_iterations", -1, "num_iterations must be an int >= 1, not -1"),
        ("max_concurrency", 0, "max_concurrency must be an int >= 1, not 0"),
        ("retries", -1, "retries must be an int >= 0, not -1"),
        ("retries", False, "retries must be an int >= 0, not False"),
        ("visibility_timeout_sec", 0, "visibility_timeout_sec must be a finite number > 0, not 0"),
        ("visibility_timeout_sec", math.inf, "must be a finite number > 0, not inf"),
        ("long_poll_time_sec", -0.5, "long_poll_time_sec must be a finite number >= 0, not -0.5"),
        (
            "long_poll_time_sec",
            math.nan,
            "long_poll_time_sec must be a finite number >= 0, not nan",
        ),
        ("long_poll_time_sec", True, "long_poll_time_sec must be a finite number >= 0, not True"),
    ],
)
def test_invalid_field_values(field: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        QueueConfig("high", **{field: value})  # type: ignore[arg-type]
    assert str(caught.value).startswith("queue 'high': ")
    assert str(caught.value).endswith(expected)
    assert caught.value.queue == "high"
    assert caught.value.field == field


@pytest.mark.parametrize("name", ["", "9lives", "has space", "a.b", "x" * 65])
def test_invalid_queue_names(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid queue name") as caught:
        QueueConfig(name)
    assert caught.value.field == "name"


def test_non_str_queue_name() -> None:
    with pytest.raises(ConfigError, match="queue name must be a str, not int"):
        QueueConfig(7)  # type: ignore[arg-type]


def test_config_error_is_a_malformed_argument_and_pickles() -> None:
    error = ConfigError("batch_size is bad", source="q.yaml", queue="high", field="batch_size")
    assert isinstance(error, MalformedArgument)
    assert isinstance(error, ValueError)
    assert str(error) == "q.yaml: queue 'high': batch_size is bad"
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error)
    assert (copy.problem, copy.source, copy.queue, copy.field) == (
        "batch_size is bad",
        "q.yaml",
        "high",
        "batch_size",
    )


def test_default_queues() -> None:
    assert (QueueConfig("default", priority=1),) == DEFAULT_QUEUES


# -- load_queue_config: layouts -------------------------------------------------------------


def test_kale_example_loads_sorted_by_priority(tmp_path: Path) -> None:
    queues = load_queue_config(write(tmp_path, KALE_EXAMPLE))
    assert queues == (
        QueueConfig("high_priority", 100, 10, 60, 1, 10),
        QueueConfig("default", 40, 10, 60, 1, 5),
        QueueConfig("low_priority", 5, 10, 60, 5, 5),
    )


def test_kale_layout_sorts_whatever_the_file_order(tmp_path: Path) -> None:
    text = (
        "a: {name: low, priority: 1}\nb: {name: high, priority: 9}\nc: {name: mid, priority: 5}\n"
    )
    assert [q.name for q in load_queue_config(write(tmp_path, text))] == ["high", "mid", "low"]


def test_kale_layout_key_is_only_a_label(tmp_path: Path) -> None:
    text = "whatever:\n  name: emails\n  priority: 3\n"
    assert load_queue_config(write(tmp_path, text)) == (QueueConfig("emails", priority=3),)


def test_list_layout_fills_defaults_and_keeps_ties_in_file_order(tmp_path: Path) -> None:
    text = """\
- {name: first, priority: 5}
- {name: top, priority: 50, batch_size: 1, visibility_timeout_sec: 2.5}
- {name: second, priority: 5, max_concurrency: 4, retries: 0}
"""
    assert load_queue_config(str(write(tmp_path, text))) == (
        QueueConfig("top", priority=50, batch_size=1, visibility_timeout_sec=2.5),
        QueueConfig("first", priority=5),
        QueueConfig("second", priority=5, max_concurrency=4, retries=0),
    )


def test_queues_key_layout(tmp_path: Path) -> None:
    text = """\
queues:
  - name: low
    priority: 1
    long_poll_time_sec: 0
  - name: high
    priority: 10
    num_iterations: 2
"""
    assert load_queue_config(write(tmp_path, text)) == (
        QueueConfig("high", priority=10, num_iterations=2),
        QueueConfig("low", priority=1, long_poll_time_sec=0),
    )


def test_a_kale_queue_labelled_queues_is_still_kale_layout(tmp_path: Path) -> None:
    text = "queues: {name: queues, priority: 2}\n"
    assert load_queue_config(write(tmp_path, text)) == (QueueConfig("queues", priority=2),)


# -- load_queue_config: errors --------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("priority", "0", "priority must be an int >= 1, not 0"),
        ("priority", "high", "priority must be an int >= 1, not 'high'"),
        ("batch_size", "'10x'", "batch_size must be an int >= 1, not '10x'"),
        ("batch_size", "yes", "batch_size must be an int >= 1, not True"),
        ("batch_size", "2.5", "batch_size must be an int >= 1, not 2.5"),
        (
            "visibility_timeout_sec",
            "0",
            "visibility_timeout_sec must be a finite number > 0, not 0",
        ),
        (
            "visibility_timeout_sec",
            ".inf",
            "visibility_timeout_sec must be a finite number > 0, not inf",
        ),
        ("long_poll_time_sec", "-1", "long_poll_time_sec must be a finite number >= 0, not -1"),
        ("long_poll_time_sec", ".nan", "long_poll_time_sec must be a finite number >= 0, not nan"),
        ("num_iterations", "null", "num_iterations must be an int >= 1, not None"),
        ("max_concurrency", "0", "max_concurrency must be an int >= 1, not 0"),
        ("retries", "-2", "retries must be an int >= 0, not -2"),
    ],
)
def test_each_invalid_field_names_file_queue_and_field(
    in_tmp: Path, field: str, value: str, expected: str
) -> None:
    text = f"high:\n  name: high\n  priority: 10\n  {field}: {value}\n"
    assert load_error(text) == f"queues.yaml: queue 'high': {expected}"


def test_error_attributes(in_tmp: Path) -> None:
    write(in_tmp, "- {name: high, priority: 1, batch_size: 0}\n")
    with pytest.raises(ConfigError) as caught:
        load_queue_config(in_tmp / "queues.yaml")
    error = caught.value
    assert (error.source, error.queue, error.field) == (
        str(in_tmp / "queues.yaml"),
        "high",
        "batch_size",
    )
    assert str(error).startswith(f"{in_tmp / 'queues.yaml'}: queue 'high': batch_size")


def test_invalid_name_is_reported_by_position(in_tmp: Path) -> None:
    message = load_error("- {name: ok, priority: 1}\n- {name: 'has space', priority: 1}\n")
    assert message.startswith("queues.yaml: queue #2: invalid queue name 'has space'")
    message = load_error("mine: {name: 12, priority: 1}\n")
    assert message == "queues.yaml: key 'mine': queue name must be a str, not int"


def test_missing_required_fields(in_tmp: Path) -> None:
    assert (
        load_error("- {name: high, batch_size: 3}\n")
        == "queues.yaml: queue 'high': missing required field 'priority'"
    )
    assert load_error("- {priority: 3}\n") == "queues.yaml: queue #1: missing required field 'name'"
    assert (
        load_error("mine: {priority: 3}\n")
        == "queues.yaml: key 'mine': missing required field 'name'"
    )


def test_unknown_field_names_it_and_the_known_ones(in_tmp: Path) -> None:
    message = load_error("- {name: high, priority: 1, batchsize: 3}\n")
    assert message == (
        "queues.yaml: queue 'high': unknown field 'batchsize' (did you mean 'batch_size'?); "
        "the fields are name, priority, batch_size, visibility_timeout_sec, long_poll_time_sec, "
        "num_iterations, max_concurrency, retries, max_items, max_size, max_item_size, max_age, "
        "discard_old_when_full, rate_limit"
    )
    message = load_error("- {name: high, priority: 1, 7: x}\n")
    assert message.startswith("queues.yaml: queue 'high': unknown field 7; the fields are name")


def test_duplicate_names(in_tmp: Path) -> None:
    text = (
        "a: {name: high, priority: 1}\nb: {name: low, priority: 1}\nc: {name: high, priority: 2}\n"
    )
    assert load_error(text) == "queues.yaml: queue 'high': defined twice (key 'a' and key 'c')"
    text = "- {name: x, priority: 1}\n- {name: x, priority: 1}\n"
    assert load_error(text) == "queues.yaml: queue 'x': defined twice (queue #1 and queue #2)"


def test_bad_yaml_reports_the_line(in_tmp: Path) -> None:
    text = "high:\n  name: high\n  priority: [1\n  batch_size: 3\nlow: {\n"
    message = load_error(text)
    assert message.startswith("queues.yaml: not valid YAML: line ")
    assert re.search(r"line \d+, column \d+: ", message)
    message = load_error("a:\n  b: 1\n c: 2\n")
    assert message == (
        "queues.yaml: not valid YAML: line 3, column 2: expected <block end>, but found "
        "'<block mapping start>' (while parsing a block mapping from line 1)"
    )


def test_undecodable_file_is_bad_yaml(in_tmp: Path) -> None:
    (in_tmp / "queues.yaml").write_bytes(b"name: \xff\xfe\x00bad\n")
    with pytest.raises(ConfigError, match=r"^queues\.yaml: not valid YAML"):
        load_queue_config("queues.yaml")


def test_missing_file(in_tmp: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_queue_config("nope.yaml")
    assert str(caught.value) == "nope.yaml: no such file"
    assert caught.value.source == "nope.yaml"


def test_directory_is_not_a_file(in_tmp: Path) -> None:
    (in_tmp / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"^dir\.yaml: cannot read the file"):
        load_queue_config("dir.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "",
            "expected a mapping of queues (Kale's layout), a list of queues or 'queues: [...]', "
            "not nothing (an empty document or null)",
        ),
        ("just text\n", "not a string"),
        ("42\n", "not int"),
        ("[]\n", "the file defines no queues"),
        ("{}\n", "the file defines no queues"),
        ("queues: []\n", "the file defines no queues"),
        ("- [name, high]\n", "queue #1 must be a mapping of queue fields, not a list"),
        ("high: 5\n", "key 'high' must be a mapping of queue fields, not int"),
        ("queues: [{name: a, priority: 1}]\nextra: 1\n", "unexpected top-level keys next to"),
    ],
)
def test_wrong_shapes(in_tmp: Path, text: str, expected: str) -> None:
    message = load_error(text)
    assert message.startswith("queues.yaml: ")
    assert expected in message


def test_yaml_tags_are_not_executed(in_tmp: Path) -> None:
    # safe_load: a python/object tag is an error, never a call.
    message = load_error("- !!python/object/apply:os.system ['true']\n")
    assert message.startswith("queues.yaml: not valid YAML: ")


# -- queues_from_names ------------------------------------------------------------------------


def test_queues_from_names_descending_priorities_in_given_order() -> None:
    assert queues_from_names(["high", "default", "low"]) == (
        QueueConfig("high", priority=3),
        QueueConfig("default", priority=2),
        QueueConfig("low", priority=1),
    )
    assert queues_from_names(("only",)) == (QueueConfig("only", priority=1),)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([], "no queue names given"),
        ("high,low", "must be a list of str, not a str"),
        (["high", "bad name"], "invalid queue name 'bad name'"),
        (["a", "b", "a"], "queue names given more than once: a"),
    ],
)
def test_queues_from_names_errors(names: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        queues_from_names(names)


def test_kestrel_bounds_become_engine_config_keys() -> None:
    queue = QueueConfig("work", max_items=100, max_size=1 << 20, max_age=30,
                        discard_old_when_full=True)  # fmt: skip
    assert queue.limits() == {
        "work-max-items": 100,
        "work-max-size": 1 << 20,
        "work-max-age": 30.0,
        "work-discard-old-when-full": 1,
    }
    assert QueueConfig("work").limits() == {}


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_items", -1), ("max_size", 1.5), ("max_item_size", "big"), ("max_age", -2),
     ("discard_old_when_full", "yes")],
)  # fmt: skip
def test_bad_kestrel_bounds_are_config_errors(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        QueueConfig("work", **{field: value})  # type: ignore[arg-type]


def test_a_queues_rate_limit_is_read_and_checked(in_tmp: Path) -> None:
    Path("queues.yaml").write_text("- {name: api, priority: 1, rate_limit: 100/m}\n")
    [queue] = load_queue_config("queues.yaml")
    assert queue.rate_limit == "100/m"
    message = load_error("- {name: api, priority: 1, rate_limit: often}\n")
    assert "rate_limit" in message
    assert "\n" not in message

"""The JSON the App's codec makes, which the engine's put check measures without reading
(`CodecJSON`): the codec can make no text the check would refuse, and the check still
reads what it cannot vouch for."""

import enum
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lanner import App
from lanner.checks.values import CodecJSON, json_text, strict_json
from lanner.codec import JobIdentity, JSONCodec, Payload, encode_json
from lanner.errors import ArgumentError, MalformedArgument, PayloadTooLarge

JOB = ("jid-1", "app.tasks.send", "emails")


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    def __repr__(self) -> str:
        return "not a number"  # the encoder writes float's own repr, never this


class Count(int):
    def __repr__(self) -> str:
        return "NaN"


ODD_VALUES: list[Any] = [
    "\ud800 lone surrogate",
    'quote " backslash \\ control \x00\x1f del \x7f',
    "ünïcödé ☃ 𝄞",
    -0.0,
    1e308,
    5e-324,
    2**63,
    -(10**100),
    Level.HIGH,
    Ratio(0.5),
    Count(7),
    True,
    None,
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
    [[[[]]]],
    {"": {}},
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=range(len(ODD_VALUES)))
def test_every_text_the_codec_makes_is_ascii_json_the_strict_check_reads(value: Any) -> None:
    text = encode_json((value,), {"k": value}, value, {"h": "x"}, {"wf": [value]}, JOB)
    assert type(text) is CodecJSON
    assert text.isascii()
    strict_json(text, "data")  # what the put check would have done: it reads it
    json_text(str(text), "data", 10**6)


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, [1.0, math.nan], {"a": -math.inf}, {math.nan: 1}],
)
def test_the_codec_never_makes_nan_or_infinity(value: Any) -> None:
    with pytest.raises(ArgumentError):
        encode_json((value,), {}, None, None, None, JOB)


def test_the_codec_refuses_an_int_too_long_to_read_back() -> None:
    with pytest.raises(ArgumentError):
        encode_json((10**5000,), {}, None, None, None, JOB)


def test_the_codec_interface_still_returns_a_plain_str() -> None:
    data = JSONCodec().encode(Payload((1,)), JobIdentity(*JOB))
    assert type(data) is str
    assert data == encode_json((1,), {}, None, None, None, JOB)


def test_the_check_measures_codec_text_and_hands_on_a_plain_str() -> None:
    text = encode_json((1, "x"), {}, None, None, None, JOB)
    checked = json_text(text, "data", len(text))
    assert type(checked) is str
    assert checked == text
    with pytest.raises(PayloadTooLarge):
        json_text(text, "data", len(text) - 1)


def test_the_check_reads_codec_text_that_may_nest_deeply() -> None:
    # Many brackets: the check cannot vouch for its depth from its length, so it reads it.
    deep = CodecJSON("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MalformedArgument, match="nested too deeply"):
        json_text(deep, "data", 10**6)
    wide = encode_json(([[i] for i in range(500)],), {}, None, None, None, JOB)
    assert json_text(wide, "data", 10**6) == wide


def test_only_the_codec_s_type_is_trusted() -> None:
    class Lookalike(str):
        pass

    for text in ("NaN", Lookalike('{"a": NaN}'), '{"a": Infinity}'):
        with pytest.raises(MalformedArgument, match="not valid JSON"):
            json_text(text, "data", 100)


def test_a_published_job_stores_the_codec_s_text_as_a_plain_str(tmp_path: Path) -> None:
    path = tmp_path / "trusted.db"
    app = App(f"sqlite:///{path}")

    @app.task(name="trusted.add")
    def add(a: int, b: str) -> None:
        """Published, never run."""

    jid = add.delay(1, "x").jid
    job = app.engine.get(jid)
    app.close()
    assert job is not None
    assert type(job.data) is str
    assert job.data == encode_json((1, "x"), {}, None, None, None, (jid, "trusted.add", "default"))
    with sqlite3.connect(path) as conn:
        (kind,) = conn.execute("SELECT typeof(data) FROM jobs WHERE jid = ?", (jid,)).fetchone()
    assert kind == "text"

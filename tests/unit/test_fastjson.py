"""lanner.fastjson: msgspec's reading gives json.loads's values, and its errors."""

from __future__ import annotations

import json
import math

import pytest

from lanner import fastjson

TEXTS = [
    '{"v":1,"args":[1,"é",null,true],"kwargs":{"a":{"b":[]}},"app_data":null}',
    "123456789012345678901234567890",  # past 64 bits: still an int
    "-18446744073709551617",
    "[1e400, -1e400]",  # past a float's range: infinities, as json reads them
    '"\\ud800"',  # a lone surrogate escape
    '{"a":1,"a":2}',
    "[0.1, -0.0, 1E5, 1.5e-7]",
    "[NaN, Infinity]",
]


@pytest.mark.parametrize("text", TEXTS)
def test_reads_what_json_reads(text: str) -> None:
    expected, got = json.loads(text), fastjson.loads(text)
    assert repr(got) == repr(expected)  # nan == nan is False; types and signs count


def test_refuses_what_json_refuses() -> None:
    with pytest.raises(json.JSONDecodeError):
        fastjson.loads("{bad")


def test_msgspec_reads_when_installed() -> None:
    pytest.importorskip("msgspec")
    assert fastjson.FAST
    assert math.isinf(fastjson.loads("[1e400]")[0])

"""Reading JSON on the per-job path: msgspec when it is installed (`pip install
'lanner[speed]'`), the standard library's `json` otherwise, with the same values either way.

Only reading: what lanner writes (payloads, results, the records qless clients read) stays
the standard library's text, byte for byte, whatever is installed. msgspec refuses a few
texts `json.loads` reads (NaN and Infinity, numbers past a float's range, lone surrogate
escapes): those are read again by `json.loads`, so both give the same value or the same
error. (orjson was measured too, and turns integers past 64 bits into floats.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["FAST", "loads"]


def _standard() -> Callable[[str | bytes], Any]:
    try:
        import msgspec
    except ImportError:
        return json.loads
    decode = msgspec.json.Decoder().decode
    refused = msgspec.DecodeError

    def loads(text: str | bytes) -> Any:
        try:
            return decode(text)
        except refused:
            return json.loads(text)  # msgspec's stricter refusals; json's error if it fails too

    return loads


loads = _standard()
"""`json.loads(text)`, faster when msgspec is installed."""

FAST = loads is not json.loads
"""Whether msgspec does the reading."""

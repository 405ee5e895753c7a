"""How a memcache value is kept as a lanner job, and back.

A job's data is JSON text, a memcache value any bytes. A value that is UTF-8 text is kept
as a JSON string (so Python consumers read it with `json.loads`, and a job put by Python
with a JSON string as data comes out over memcache as that text); other bytes as
`{"base64": "..."}`. Any other JSON a job carries (a task's arguments) comes out as its
JSON text. Items put over memcache get the klass `ITEM_KLASS` and a jid unique to this
server process.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
from typing import Final

ITEM_KLASS: Final = "kestrel"


def to_data(value: bytes) -> str:
    if value.isascii():
        text = value.decode("ascii")
        # What JSON escapes: '"', '\\' and control characters (not printable); the rest of
        # ASCII stands as itself, so json.dumps would return the text quoted, no more.
        if text.isprintable() and '"' not in text and "\\" not in text:
            return '"' + text + '"'
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return '{"base64": "' + base64.b64encode(value).decode("ascii") + '"}'
    return json.dumps(text, ensure_ascii=False)


def from_data(data: str) -> bytes:
    # A JSON string with no escape and no other quote: its text stands between the quotes.
    if data.startswith('"') and data.endswith('"') and data.count('"') == 2 and "\\" not in data:
        return data[1:-1].encode("utf-8")
    if data.startswith('"'):
        text: str = json.loads(data)
        return text.encode("utf-8")
    if data.startswith('{"base64": "'):
        decoded = json.loads(data)
        if isinstance(decoded, dict) and len(decoded) == 1:
            return base64.b64decode(decoded["base64"])
    return data.encode("utf-8")


class JidMaker:
    """Jids `<random prefix>-<n>`: unique across processes and restarts, cheap to make.

    `n` has a fixed width: an engine may order items put at the same instant (one batch)
    by jid (qless's sorted sets do), and the items must then keep the order they came in.
    """

    def __init__(self) -> None:
        self._prefix = "k" + os.urandom(6).hex() + "-"
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):015d}"

"""Kestrel's memcache text protocol: request lines parsed into commands, replies formatted.

Pure functions, no I/O: the server (`lanner.kestrel.server`) feeds them the lines it reads.
A request the protocol cannot make sense of raises `ProtocolError`, carrying the reply
memcache clients expect (`ERROR` for an unknown command, `CLIENT_ERROR <why>` for a
malformed one) and whether the connection must close after it, as Kestrel does for a bad
combination of `get` options.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from lanner.checks import names
from lanner.errors import InvalidName

MAX_LINE: Final = 2048
"""The longest request line (memcache keys are at most 250 bytes): longer is refused."""

RELATIVE_EXPIRY_LIMIT: Final = 1_000_000
"""Kestrel's rule for `set`'s expiry: below this, seconds from now; from it, a Unix time."""

KNOWN_KEYS: Final = 4096
"""Get keys and queue names remembered once parsed: a server parses the same few keys
thousands of times a second (a busy one spends a tenth of its CPU checking them anew)."""


class ProtocolError(Exception):
    """A request refused with `reply`; with `close`, the connection is closed after it;
    `skip`: bytes of a refused set's data block to drop (the rest of the request)."""

    def __init__(self, reply: bytes, close: bool = False, skip: int = 0) -> None:
        super().__init__(reply.decode(errors="replace"))
        self.reply = reply
        self.close = close
        self.skip = skip


def client_error(why: str, close: bool = False) -> ProtocolError:
    return ProtocolError(b"CLIENT_ERROR " + why.encode() + b"\r\n", close)


UNKNOWN_COMMAND: Final = ProtocolError(b"ERROR\r\n")


@dataclass(frozen=True, slots=True)
class Get:
    """`get <queue>[/t=<ms>][/open][/close][/abort][/peek]`: `key` is echoed in the reply."""

    key: str
    queue: str
    timeout: float  # seconds to wait for an item; 0: answer at once
    open: bool
    close: bool
    abort: bool
    peek: bool


@dataclass(frozen=True, slots=True)
class Set:
    """`set <queue> <flags> <expiry> <bytes> [noreply]`: the data block follows."""

    queue: str
    expiry: float | None  # a Unix time, or None: never
    size: int
    noreply: bool


@dataclass(frozen=True, slots=True)
class QueueCommand:
    """delete, flush (one queue); confirm (a count too)."""

    name: str
    queue: str
    count: int = 0
    noreply: bool = False


@dataclass(frozen=True, slots=True)
class Simple:
    """flush_all, version, stats, shutdown, quit: no queue."""

    name: str
    noreply: bool = False


Command = Get | Set | QueueCommand | Simple

_SIMPLE: Final = frozenset({"flush_all", "version", "stats", "shutdown", "quit"})
_ONE_QUEUE: Final = frozenset({"delete", "flush"})


def parse(line: bytes, now: float | None = None) -> list[Command]:
    """The commands of one request line (without its CRLF); several for a multi-key get."""
    try:
        words = line.decode("ascii").split()
    except UnicodeDecodeError:
        raise client_error("request lines must be ASCII", close=True) from None
    if not words:
        raise UNKNOWN_COMMAND
    name, args = words[0].lower(), words[1:]
    if name in ("get", "gets"):
        if not args:
            raise client_error("get needs a queue name", close=True)
        return [parse_get(key) for key in args]
    if name == "set":
        return [_parse_set(args, now)]
    noreply = bool(args) and args[-1] == "noreply"
    if noreply:
        args = args[:-1]
    if name in _ONE_QUEUE and len(args) == 1:
        return [QueueCommand(name, _queue(args[0]), noreply=noreply)]
    if name == "confirm" and len(args) == 2:
        return [QueueCommand(name, _queue(args[0]), _count(args[1]), noreply)]
    if name in _SIMPLE and (not args or name in ("flush_all", "stats", "shutdown")):
        return [Simple(name, noreply)]
    if name in _ONE_QUEUE or name in _SIMPLE or name == "confirm":
        raise client_error(f"wrong arguments for {name}")
    raise UNKNOWN_COMMAND


_gets: dict[str, Get] = {}
_queues: dict[str, str] = {}


def parse_get(key: str) -> Get:
    """A get's key: the queue, then options separated by '/' (Kestrel's rules of combining)."""
    known = _gets.get(key)
    if known is not None:
        return known  # a Get is immutable: one may serve every request with that key
    get = _parse_get(key)
    if len(_gets) >= KNOWN_KEYS:
        _gets.clear()  # keys that come and go (a key per client) must not grow it forever
    _gets[key] = get
    return get


def _parse_get(key: str) -> Get:
    queue, *options = key.split("/")
    timeout, flags = 0.0, set()
    for option in options:
        if option.startswith("t="):
            timeout = _milliseconds(option[2:]) / 1000
        elif option in ("open", "close", "abort", "peek"):
            flags.add(option)
        else:
            raise client_error(f"unknown get option {option!r}", close=True)
    if "peek" in flags and len(flags) > 1:
        raise client_error("peek cannot be combined with open, close or abort", close=True)
    if "abort" in flags and len(flags) > 1:
        raise client_error("abort cannot be combined with open or close", close=True)
    return Get(
        key,
        _queue(queue),
        timeout,
        "open" in flags,
        "close" in flags,
        "abort" in flags,
        "peek" in flags,
    )


def _parse_set(args: list[str], now: float | None) -> Set:
    noreply = len(args) == 5 and args[4] == "noreply"
    if len(args) != 4 and not noreply:
        raise client_error("set takes <queue> <flags> <expiry> <bytes> [noreply]", close=True)
    try:
        int(args[1])
        expiry = int(args[2])
        size = int(args[3])
    except ValueError:
        raise client_error("bad data chunk", close=True) from None
    if size < 0:
        raise client_error("bad data chunk", close=True)
    try:
        queue = _queue(args[0])
    except ProtocolError as error:
        error.skip = size + 2
        raise
    return Set(queue, expires_at(expiry, time.time() if now is None else now), size, noreply)


def expires_at(expiry: int, now: float) -> float | None:
    """`set`'s expiry as a Unix time: 0 never, below 1,000,000 seconds from now (negative:
    already past), else a Unix time itself."""
    if expiry == 0:
        return None
    return now + expiry if expiry < RELATIVE_EXPIRY_LIMIT else float(expiry)


def _queue(value: str) -> str:
    if value in _queues:
        return value
    try:
        names.queue_name(value)
    except InvalidName as error:
        raise client_error(str(error)) from None
    if len(_queues) >= KNOWN_KEYS:
        _queues.clear()
    _queues[value] = value
    return value


def _count(value: str) -> int:
    if not value.isdigit():
        raise client_error(f"bad count {value!r}")
    return int(value)


def _milliseconds(value: str) -> int:
    if not value.isdigit() or len(value) > 9:
        raise client_error(f"bad timeout t={value!r}: whole milliseconds", close=True)
    return int(value)


def value_reply(key: str, value: bytes) -> bytes:
    """A get that found an item: its VALUE block (flags 0, as Kestrel), then END."""
    return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key.encode(), len(value), value)


def stats_reply(stats: list[tuple[str, object]]) -> bytes:
    lines = [f"STAT {name} {value}\r\n" for name, value in stats]
    return ("".join(lines) + "END\r\n").encode()

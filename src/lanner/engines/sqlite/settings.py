"""The SQLite engine's configuration: `config_*` values, and the settings commands read.

Values are stored JSON-encoded in the `config` table; the defaults live in `lanner.engine`
(CONFIG_DEFAULTS) and are never stored, so a later lanner can change them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping

from lanner.engine import CONFIG_DEFAULTS
from lanner.engines.sqlite import eventlog
from lanner.errors import MalformedArgument
from lanner.records import ConfigValue

Config = Mapping[str, ConfigValue]


def read_all(conn: sqlite3.Connection) -> dict[str, ConfigValue]:
    """The defaults merged with what was set."""
    merged: dict[str, ConfigValue] = dict(CONFIG_DEFAULTS)
    for key, value in conn.execute("SELECT key, value FROM config"):
        merged[key] = json.loads(value)
    return merged


def read(conn: sqlite3.Connection, key: str) -> ConfigValue | None:
    row = conn.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
    if row is None:
        return CONFIG_DEFAULTS.get(key)
    value: ConfigValue = json.loads(row[0])
    return value


def write(conn: sqlite3.Connection, key: str, value: ConfigValue) -> None:
    conn.execute(
        "INSERT INTO config (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, json.dumps(value)),
    )
    # The value as qless-core hears it (a command argument: repr of a float).
    text = repr(value) if isinstance(value, float) else str(value)
    eventlog.emit("config_set", details={"option": key, "value": text})


def unset(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM config WHERE key = ?", (key,))
    eventlog.emit("config_unset", details={"option": key})


def number(config: Config, key: str, default: float = 0.0) -> float:
    value = config.get(key, default)
    try:
        return float(value)
    except ValueError:
        raise MalformedArgument(f"config {key}={value!r} is not a number") from None


def heartbeat(config: Config, queue: str) -> float:
    """Seconds a lock of `queue` lasts: `<queue>-heartbeat`, else `heartbeat`."""
    per_queue = f"{queue}-heartbeat"
    return number(config, per_queue if per_queue in config else "heartbeat")


def history_cap(config: Config) -> int:
    """How many entries a job's history keeps (the first, the put, always among them)."""
    return max(2, int(number(config, "max-job-history")))

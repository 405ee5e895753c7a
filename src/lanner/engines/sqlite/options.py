"""Settings of the SQLite engine, and their parsing from a broker URL's query string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from lanner.engines.sqlite.schema import SYNCHRONOUS_MODES
from lanner.errors import MalformedArgument


@dataclass(frozen=True, slots=True)
class SQLiteOptions:
    """How the SQLite engine opens and uses its file.

    synchronous     `full` (default): a completed put survives power loss. `normal` is
                    faster (one fsync per checkpoint, not per commit) and survives process
                    crashes, but a power loss may roll back the last transactions.
    busy_timeout    seconds a writer waits for another process's transaction.
    max_data_bytes  the largest job data `put` accepts.
    poll_interval   longest pause between two checks of a blocked `pop` (seconds).
    """

    synchronous: str = "full"
    busy_timeout: float = 30.0
    max_data_bytes: int = 10 * 1024 * 1024
    poll_interval: float = 0.002

    def __post_init__(self) -> None:
        if self.synchronous not in SYNCHRONOUS_MODES:
            raise MalformedArgument(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, "
                f"not {self.synchronous!r}"
            )
        for name in ("busy_timeout", "poll_interval"):
            if not getattr(self, name) > 0:
                raise MalformedArgument(f"{name} must be > 0 seconds")
        if self.max_data_bytes < 2:
            raise MalformedArgument("max_data_bytes must be at least 2")

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> SQLiteOptions:
        known = {field.name: field.type for field in fields(cls)}
        unknown = sorted(set(query) - set(known))
        if unknown:
            raise MalformedArgument(
                f"unknown SQLite option(s) {', '.join(unknown)}; known: {', '.join(known)}"
            )
        values: dict[str, str | int | float] = {}
        for name, text in query.items():
            try:
                if known[name] == "int":
                    values[name] = int(text)
                elif known[name] == "float":
                    values[name] = float(text)
                else:
                    values[name] = text.lower()
            except ValueError:
                raise MalformedArgument(f"SQLite option {name}={text!r} is not a number") from None
        return cls(**values)  # type: ignore[arg-type]

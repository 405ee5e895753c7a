"""Settings of the SQLite engine, and their parsing from a broker URL's query string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lanner.engines.sqlite.schema import SYNCHRONOUS_MODES
from lanner.engines.urloptions import options_from_query
from lanner.errors import MalformedArgument


@dataclass(frozen=True, slots=True)
class SQLiteOptions:
    """How the SQLite engine opens and uses its file.

    synchronous     `full` (default): a completed put survives power loss. `normal` is
                    faster (one fsync per checkpoint, not per commit) and survives process
                    crashes, but a power loss may roll back the last transactions.
    busy_timeout    seconds a writer waits for another process's transaction.
    max_data_bytes  the largest job data `put` accepts.
    poll_interval   longest pause between two checks for a commit of a blocked `pop`, where
                    the file cannot be watched (not Linux; seconds).
    shared          1: the file may be the application's own database, to which lanner adds
                    its tables (publishing within the application's transactions,
                    docs/integrations.md); 0 (default): lanner's file only.
    """

    synchronous: str = "full"
    busy_timeout: float = 30.0
    max_data_bytes: int = 10 * 1024 * 1024
    poll_interval: float = 0.002
    shared: int = 0

    def __post_init__(self) -> None:
        if self.synchronous not in SYNCHRONOUS_MODES:
            raise MalformedArgument(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, "
                f"not {self.synchronous!r}"
            )
        for name in ("busy_timeout", "poll_interval"):
            if not getattr(self, name) > 0:
                raise MalformedArgument(f"{name} must be > 0 seconds")
        if self.shared not in (0, 1):
            raise MalformedArgument(f"shared must be 0 or 1, not {self.shared}")
        if self.max_data_bytes < 2:
            raise MalformedArgument("max_data_bytes must be at least 2")

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> SQLiteOptions:
        # Durability modes are case-insensitive in SQLite; here too.
        given = {k: v.lower() if k == "synchronous" else v for k, v in query.items()}
        return options_from_query(cls, given, "SQLite")

"""The embedded SQLite engine (the default): see engine.py, and schema.py for the layout."""

from lanner.engines.sqlite.engine import SQLiteEngine
from lanner.engines.sqlite.options import SQLiteOptions

__all__ = ["SQLiteEngine", "SQLiteOptions"]

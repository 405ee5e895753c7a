"""Putting jobs on the caller's own connection: which connections qualify.

`SQLiteEngine.put_within` writes lanner's rows inside the application's transaction, so
the application's database file must be the one holding lanner's tables (the broker URL
names it). One file is what keeps the guarantee: SQLite commits a transaction over two
ATTACHed files in WAL mode file by file, so a crash in the middle of that COMMIT could keep
the application's rows without the job, or the job without the rows (sqlite.org's
"atomic commit" page says so). lanner's tables are made in that file when the engine first
opens it (schema.py), which also switches it to WAL mode.
"""

from __future__ import annotations

import os
import sqlite3

from lanner.errors import MalformedArgument


def check_connection(conn: object, path: str) -> None:
    """Refuse (`MalformedArgument`, nothing written) a connection that is not an sqlite3
    connection open on `path`, or that would commit each statement by itself."""
    check_transaction(conn)
    assert isinstance(conn, sqlite3.Connection)
    main = _main_file(conn)
    if not main or not _same_file(main, path):
        raise MalformedArgument(
            f"within=: the connection is open on {main or 'a database in memory'}, not on "
            f"lanner's file {path}: publish within a transaction of the database that holds "
            "lanner's tables (the broker URL names it)"
        )


def check_transaction(conn: object) -> None:
    """Refuse a connection that is not an sqlite3 one, or that would commit each statement
    by itself (autocommit, and no transaction open)."""
    if not isinstance(conn, sqlite3.Connection):
        raise MalformedArgument(
            f"within= takes the sqlite3.Connection of your transaction, not {type(conn).__name__}"
        )
    autocommit = getattr(conn, "autocommit", -1) is True  # Python 3.12's PEP 249 mode
    if (autocommit or conn.isolation_level is None) and not conn.in_transaction:
        raise MalformedArgument(
            "within=: the connection is in autocommit mode and in no transaction, so the "
            "job would not be part of one: BEGIN first"
        )


def _main_file(conn: sqlite3.Connection) -> str:
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return str(file)
    return ""


def _same_file(one: str, other: str) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False

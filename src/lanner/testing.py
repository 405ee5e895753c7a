"""Helpers for the tests of projects that use lanner: run jobs in-process, deterministically.

    from lanner.testing import drain, eager, temporary_store

    with temporary_store(app):          # the app on a fresh SQLite file for the block
        signup.delay(42)
        drain(app)                      # runs it here; raises the first task error

    with eager(app):                    # publishing runs the task at once
        assert add.delay(2, 3).result() == 5

The pytest plugin (`lanner.pytest_plugin`, loaded by pytest when lanner is installed)
adds the fixture `lanner_app`: an App on a SQLite file in the test's temporary folder.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from lanner.operations import drain

if TYPE_CHECKING:
    from lanner.app import App

__all__ = ["drain", "eager", "temporary_store"]


@contextmanager
def eager(app: App) -> Iterator[App]:
    """For the block, `app` runs each job it publishes at once, in this process
    (`App(eager=True)` does so for good; `lanner.inprocess.eager` says what that leaves out)."""
    before = app.eager
    app.eager = True
    try:
        yield app
    finally:
        app.eager = before


@contextmanager
def temporary_store(app: App, directory: str | Path | None = None) -> Iterator[str]:
    """For the block, `app` publishes to (and `drain` runs from) a new SQLite file, in
    `directory` or else a temporary folder removed afterwards; yield its broker URL. The
    app's own store is neither opened nor touched."""
    with tempfile.TemporaryDirectory(prefix="lanner-test-") as made:
        url = f"sqlite:///{Path(directory or made).resolve() / 'lanner-test.db'}"
        settings, engine = app.settings, app._engine
        app.settings, app._engine = replace(settings, broker=url), None
        try:
            yield url
        finally:
            app.close()
            app.settings, app._engine = settings, engine

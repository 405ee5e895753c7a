"""lanner's pytest plugin (registered under the `pytest11` entry point): its fixtures.

    def test_signup(lanner_app):
        @lanner_app.task
        def hello(name: str) -> str: ...

`lanner_app` is an App on a SQLite file in the test's `tmp_path`, closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from lanner.app import App


@pytest.fixture
def lanner_app(tmp_path: Path) -> Iterator[App]:
    """An App on `tmp_path / "lanner.db"`, with lanner's defaults."""
    from lanner.app import App

    app = App(f"sqlite:///{tmp_path / 'lanner.db'}")
    try:
        yield app
    finally:
        app.close()

"""Fixtures of the command-line tests: a fresh SQLite store in an environment that neither
configures lanner nor styles output (`url`), an engine open on it (`engine`), and the
`lanner` group with the admin commands (`cli`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import lanner.app
from lanner import Engine, open_engine
from lanner.commands import register_admin


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh store, and an environment that neither configures lanner nor styles output."""
    for name in ("LANNER_BROKER", "LANNER_SETTINGS_MODULE", "LANNER_QUEUE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(lanner.app, "_default_app", None)  # the CLI sets it; put it back after
    return f"sqlite:///{tmp_path}/x.db"


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    opened = open_engine(url)
    yield opened
    opened.close()


@pytest.fixture
def cli() -> click.Group:
    """The `lanner` group with the admin commands (status, jobs, retry, ...) registered."""
    group = click.Group("lanner")
    register_admin(group)
    return group

"""What the subcommands share: their connection options, and the App they work with.

Every command that touches a store takes `-A/--app MODULE[:ATTR]` and `--broker URL`
(`connection_options`) and opens its App with `session`, which turns the errors lanner
raises on purpose into one line and exit status 1, never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from lanner.app import App, default_app, set_default_app
from lanner.engines import sqlite_path
from lanner.errors import LannerError
from lanner.settings import load_settings

F = TypeVar("F", bound=Callable[..., Any])

app_option = click.option(
    "-A",
    "--app",
    "app_path",
    metavar="MODULE[:ATTR]",
    help="Module that defines your tasks and App (attribute 'app' unless :ATTR is given).",
)
broker_option = click.option(
    "--broker",
    metavar="URL",
    envvar="LANNER_BROKER",
    help="Broker URL, e.g. sqlite:///lanner.db (default: settings, then sqlite:///lanner.db).",
)


def connection_options(command: F) -> F:
    """`-A/--app` and `--broker`, which every command on a store takes."""
    return app_option(broker_option(command))


def json_option(command: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of tables."
    )(command)


def limit_option(help_text: str) -> Callable[[F], F]:
    """`--limit N`: at most N (25 unless given) of what a command lists."""
    return click.option(
        "--limit",
        metavar="N",
        type=click.IntRange(min=1),
        default=25,
        show_default=True,
        help=help_text,
    )


def _require_store(url: str) -> None:
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        raise click.ClickException(
            f"no store at {url} ({os.path.abspath(path)} does not exist): publish a task or "
            "start a worker there first, or name the store with --broker URL or -A MODULE"
        )


def import_failure(module_name: str, error: Exception) -> str:
    """What went wrong importing `module_name`, in one line: the error, and the file and
    line of its last frame outside the import machinery (a syntax error's own place)."""
    line = f"cannot import {module_name!r}: {type(error).__name__}: {error}"
    if isinstance(error, SyntaxError) and error.filename:
        where: tuple[str, int | None] | None = (error.filename, error.lineno)
        line = f"cannot import {module_name!r}: {type(error).__name__}: {error.msg}"
    else:
        frames = traceback.extract_tb(error.__traceback__)
        machinery = (__file__, os.path.dirname(importlib.__file__) + os.sep, "<")
        ours = [f for f in frames if not f.filename.startswith(machinery)]
        where = (ours[-1].filename, ours[-1].lineno) if ours else None
    if where is None:  # the module itself was not found: no code of the user's ran
        return line
    path, number = where
    shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
    return f"{line} ({shown}:{number})"


def load_app(app_path: str | None, broker: str | None) -> App:
    """The App of `-A module[:attr]`, else one built from configuration (and `--broker`)."""
    if broker == "" or os.environ.get("LANNER_BROKER") == "":
        click.echo("lanner: --broker (or LANNER_BROKER) is empty: it counts as unset", err=True)
    if app_path:
        module_name, _, attribute = app_path.partition(":")
        sys.path.insert(0, "")  # like `python -m`: modules of the working directory
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # whatever the module's code raised: one line, no traceback
            raise click.ClickException(import_failure(module_name, error)) from None
        found: Any = getattr(module, attribute or "app", None)
        if found is None and not attribute:
            found = default_app()  # a module of Kale-style task classes defines no App
        if not isinstance(found, App):
            raise click.ClickException(f"{app_path} is not a lanner.App")
        if broker:
            # The module's own App, rebound: a copy would leave the module's tasks (what
            # a worker serves, where they publish) on the App they were defined on.
            found.use_broker(broker)
        set_default_app(found)
        return found
    app = App(settings=load_settings(broker=broker) if broker else load_settings())
    set_default_app(app)
    return app


@contextmanager
def session(
    app_path: str | None, broker: str | None, *, create: bool = False, serves: bool = False
) -> Iterator[App]:
    """The App to work with; lanner's errors inside become one-line click errors.

    Unless `create`, a SQLite store that does not exist is an error rather than a new
    file: a command that only looks (or changes jobs) run in the wrong folder, or with the
    wrong URL, says so instead of showing an empty store it just made. Unless `serves` (a
    server, which rides out a restart of the store as workers do), a store that cannot be
    reached fails the command within seconds (`App.one_shot`).
    """
    try:
        app = load_app(app_path, broker)
        app.one_shot = not serves
        if not create:
            _require_store(app.settings.broker)
        try:
            yield app
        finally:
            app.close()
    except LannerError as error:
        raise click.ClickException(str(error)) from None

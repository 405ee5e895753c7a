"""What the subcommands share: finding the App from `-A module` or `--broker URL`."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from lanner.app import App, default_app, set_default_app
from lanner.settings import load_settings

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


def load_app(app_path: str | None, broker: str | None) -> App:
    """The App of `-A module[:attr]`, else one built from configuration (and `--broker`)."""
    if app_path:
        module_name, _, attribute = app_path.partition(":")
        sys.path.insert(0, "")  # like `python -m`: modules of the working directory
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise click.ClickException(f"cannot import {module_name!r}: {error}") from None
        found: Any = getattr(module, attribute or "app", None)
        if found is None and not attribute:
            found = default_app()  # a module of Kale-style task classes defines no App
        if not isinstance(found, App):
            raise click.ClickException(f"{app_path} is not a lanner.App")
        app = found
        if broker:
            app = App(broker, settings=app.settings, queues=app.queues, codec=app.codec)
        set_default_app(app)
        return app
    app = App(settings=load_settings(broker=broker) if broker else load_settings())
    set_default_app(app)
    return app

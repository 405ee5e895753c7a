"""Numeric options with both bounds (`lanner.limits`): a value out of range is a one-line
error and exit status 1, like every value lanner refuses, and is refused while the command
line is read, before anything starts (`lanner worker -c 10000` forks nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


class BoundedInt(click.IntRange):
    """An int from `min` to `max` (both given)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _one_line(lambda: super(BoundedInt, self).convert(value, param, ctx))


class BoundedFloat(click.FloatRange):
    """A float from `min` to `max` (both given)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _one_line(lambda: super(BoundedFloat, self).convert(value, param, ctx))


def _one_line(convert: Callable[[], Any]) -> Any:
    """click's usage error (the usage, a hint, status 2) as one line and status 1."""
    try:
        return convert()
    except click.BadParameter as error:
        raise click.ClickException(error.format_message()) from None

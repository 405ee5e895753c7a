"""The checks of the config commands: keys, values, and the values of the settings that bound
something (LIMITS, lock leases) (`engine/config.py`'s commands)."""

from __future__ import annotations

import math
from typing import Final, NamedTuple

from lanner.checks.names import label
from lanner.checks.values import delay as due_in
from lanner.checks.values import integer, lease
from lanner.errors import MalformedArgument
from lanner.records import ConfigValue


def config_key(key: object) -> str:
    return label(key, "config key")


class Setting(NamedTuple):
    key: str
    value: ConfigValue


def config_set(key: object, value: object) -> Setting:
    checked_key = config_key(key)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise MalformedArgument(
            f"config value must be a str, int or float, not {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise MalformedArgument(f"config value must be finite, not {value}")
    return Setting(checked_key, value)


def limit_value(setting: str, value: ConfigValue) -> None:
    """A LIMITS setting's value: a number >= 0 (whole but for `max-age`), `discard-old-when-full`
    0 or 1."""
    what = f"{setting} setting"
    if setting == "max-age":
        due_in(value, what)
    elif setting == "discard-old-when-full" and value not in (0, 1):
        raise MalformedArgument(f"{what} must be 0 or 1, not {value!r}")
    else:
        integer(value, what, 0)


LEASE_SETTINGS: Final = ("heartbeat", "grace-period")
"""Config keys that set how long a lock lasts, besides each queue's `<queue>-heartbeat`."""


def lease_value(key: str, value: ConfigValue) -> None:
    """A lease setting's value: seconds up to MAX_DELAY_SEC (as a str too, as qless's
    clients give it)."""
    number: object = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise MalformedArgument(f"{key} must be a number of seconds, not {value!r}") from None
    lease(number, key)

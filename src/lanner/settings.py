"""Lanner's settings, and `load_settings`, which reads them from where users keep them.

Nothing is read or imported when lanner is imported: settings exist only once a program calls
`load_settings` (or builds a `Settings`). Layers, later wins:

1. the defaults, the field defaults of `Settings`;
2. a settings module in Kale's style, named by the `module` argument, else by the environment
   variable `LANNER_SETTINGS_MODULE`, else by Kale's `KALE_SETTINGS_MODULE`; only its ALL_CAPS
   names count (prefix helper names with `_`). Kale's names that lanner does not use
   (`AWS_*`, `COMPRESSOR`, ...) are ignored with one logged warning; any other unknown
   ALL_CAPS name is an error, so typos do not pass;
3. the environment variables `LANNER_BROKER`, `LANNER_QUEUE_CONFIG`, `LANNER_QUEUE_SELECTOR`
   and `LANNER_PICKLE_HMAC_KEY` (an empty variable counts as unset);
4. keyword overrides given to `load_settings`, by field name.

| field                         | module name                   | environment              |
|-------------------------------|-------------------------------|--------------------------|
| `broker`                      | `BROKER_URL`                  | `LANNER_BROKER`          |
| `queue_config`                | `QUEUE_CONFIG`                | `LANNER_QUEUE_CONFIG`    |
| `queue_selector`              | `QUEUE_SELECTOR`              | `LANNER_QUEUE_SELECTOR`  |
| `retry_delay_multiple_sec`    | `RETRY_DELAY_MULTIPLE_SEC`    |                          |
| `retry_delay_max_sec`         | `RETRY_DELAY_MAX_SEC` (or Kale's `SQS_MAX_TASK_DELAY_SEC`) |  |
| `die_on_resident_set_size_mb` | `DIE_ON_RESIDENT_SET_SIZE_MB` |                          |
| `max_tasks_per_child`         | `MAX_TASKS_PER_CHILD`         |                          |
| `tasks_per_process`           | `TASKS_PER_PROCESS`           |                          |
| `threads`                     | `THREADS`                     |                          |
| `shutdown_timeout_sec`        | `SHUTDOWN_TIMEOUT_SEC`        |                          |
| `time_limit_grace_sec`        | `TIME_LIMIT_GRACE_SEC`        |                          |
| `pickle_hmac_key`             | `PICKLE_HMAC_KEY`             | `LANNER_PICKLE_HMAC_KEY` |
| `imports`                     | `IMPORTS`                     |                          |
| `on_worker_startup`           | `ON_WORKER_STARTUP`           |                          |
| `on_worker_shutdown`          | `ON_WORKER_SHUTDOWN`          |                          |

A relative `QUEUE_CONFIG` in a settings module is relative to the module's file; from the
environment or an override, it is relative to the working directory when `load_settings` runs.
A module named by `KALE_SETTINGS_MODULE` is read as Kale reads it: its relative
`QUEUE_CONFIG` is relative to the working directory, and without one it is Kale's default,
`queue_config.yaml` in the working directory.
Kale's selector class paths (`kale.queue_selector.ReducedLottery`, ...) become lanner's
selector names (`reduced-lottery`, ...); Kale's tables are in `lanner.kale`. Errors are
`lanner.ConfigError`.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from lanner import kale, limits
from lanner.errors import ConfigError
from lanner.queues import DEFAULT_QUEUES, QueueConfig, load_queue_config

__all__ = [
    "KALE_SETTINGS_MODULE_ENV",
    "SETTINGS_MODULE_ENV",
    "Settings",
    "load_settings",
]

logger = logging.getLogger(__name__)

SETTINGS_MODULE_ENV: Final = "LANNER_SETTINGS_MODULE"
KALE_SETTINGS_MODULE_ENV: Final = "KALE_SETTINGS_MODULE"
"""Kale's variable for the settings module, read when LANNER_SETTINGS_MODULE is unset."""
KALE_QUEUE_CONFIG: Final = "queue_config.yaml"
"""Kale's default QUEUE_CONFIG, for a settings module named by KALE_SETTINGS_MODULE."""

MIN_HMAC_KEY_BYTES: Final = 16


@dataclass(frozen=True)
class Settings:
    """Lanner's settings; see the module docstring for their names. Bad values raise `ConfigError`.

    `broker`: the engine URL. `queue_config`: a queue config YAML file (None: `DEFAULT_QUEUES`).
    `queue_selector`: how a worker picks its next queue. `retry_delay_multiple_sec` and
    `retry_delay_max_sec`: the retry backoff (`retry_delay`). `die_on_resident_set_size_mb`: a
    worker process exits once its peak RSS reaches this (None: never). `max_tasks_per_child`: a
    worker process is replaced after this many tasks (None: never). `tasks_per_process`: how
    many jobs a worker process runs at once (1: one at a time). `threads`: how many of them
    may be sync tasks running in threads (1: one at a time). `shutdown_timeout_sec`: how
    long a shutdown waits for running tasks. `time_limit_grace_sec`: how long past a task's time
    limit before its process is killed. `pickle_hmac_key`: enables the signed pickle codec (at
    least 16 bytes). `imports`: task modules workers import. `on_worker_startup` and
    `on_worker_shutdown`: called in each worker process.
    """

    broker: str = "sqlite:///lanner.db"
    queue_config: str | None = None
    queue_selector: str = "reduced-lottery"
    retry_delay_multiple_sec: float = 60.0
    retry_delay_max_sec: float = 900.0
    die_on_resident_set_size_mb: int | None = None
    max_tasks_per_child: int | None = None
    tasks_per_process: int = 1
    threads: int = 1
    shutdown_timeout_sec: float = 30.0
    time_limit_grace_sec: float = 5.0
    pickle_hmac_key: bytes | None = None
    imports: tuple[str, ...] = ()
    on_worker_startup: Callable[[], None] | None = None
    on_worker_shutdown: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name), name))

    def retry_delay(self, retry_number: int) -> float:
        """Seconds before retry `retry_number` (0 for the first retry): Kale's backoff.

        `min(2**retry_number * retry_delay_multiple_sec, retry_delay_max_sec)`; with the
        defaults 60, 120, 240, 480, then 900 for every later retry.
        """
        if isinstance(retry_number, bool) or not isinstance(retry_number, int) or retry_number < 0:
            raise ConfigError(f"retry_number must be an int >= 0, not {retry_number!r}")
        if self.retry_delay_multiple_sec == 0:
            return 0.0
        try:
            delay = 2.0**retry_number * self.retry_delay_multiple_sec
        except OverflowError:
            delay = math.inf
        return min(delay, self.retry_delay_max_sec)

    def queues(self) -> tuple[QueueConfig, ...]:
        """The queues of `queue_config` (read on each call), or `DEFAULT_QUEUES` if it is None."""
        if self.queue_config is None:
            return DEFAULT_QUEUES
        return load_queue_config(self.queue_config)


# Checks take a value and the name it was given under, and return the value to store.


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be a non-empty str, not {value!r}", field=name)
    return value


def _path(value: object, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return _text(value, name)


def _selector(value: object, name: str) -> str:
    text = _text(value, name)
    return kale.SELECTOR_PATHS.get(text, text)


def _seconds(maximum: float) -> Callable[[object, str], float]:
    """The check of a number of seconds from 0 to `maximum` (lanner.limits)."""

    def check(value: object, name: str) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ConfigError(f"{name} must be a finite number >= 0, not {value!r}", field=name)
        _at_most(value, maximum, name)
        return float(value)

    return check


def _count(maximum: int) -> Callable[[object, str], int | None]:
    """The check of an optional count from 1 to `maximum` (lanner.limits)."""

    def check(value: object, name: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an int >= 1 or None, not {value!r}", field=name)
        _at_most(value, maximum, name)
        return value

    return check


def _at_most(value: float, maximum: float, name: str) -> None:
    if value > maximum:
        raise ConfigError(f"{name} must be at most {maximum:.0f}, not {value!r}", field=name)


def _key(value: object, name: str) -> bytes | None:
    if value is None:
        return None
    key = value.encode() if isinstance(value, str) else value
    if not isinstance(key, bytes | bytearray):
        raise ConfigError(f"{name} must be a str or bytes, not {type(value).__name__}", field=name)
    if len(key) < MIN_HMAC_KEY_BYTES:
        # The key is a secret: say how long it is, never what it is.
        raise ConfigError(
            f"{name} must be at least {MIN_HMAC_KEY_BYTES} bytes long, not {len(key)}", field=name
        )
    return bytes(key)


def _imports(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise ConfigError(
            f"{name} must be a list of module names, not {type(value).__name__}", field=name
        )
    for item in value:
        if not isinstance(item, str) or not all(part.isidentifier() for part in item.split(".")):
            raise ConfigError(f"{name} must hold dotted module names, not {item!r}", field=name)
    return tuple(value)


def _callback(value: object, name: str) -> object:
    if value is not None and not callable(value):
        raise ConfigError(
            f"{name} must be a callable or None, not {type(value).__name__}", field=name
        )
    return value


_CHECKS: Final[Mapping[str, Callable[[object, str], object]]] = {
    "broker": _text,
    "queue_config": _path,
    "queue_selector": _selector,
    "retry_delay_multiple_sec": _seconds(limits.MAX_DELAY_SEC),
    "retry_delay_max_sec": _seconds(limits.MAX_DELAY_SEC),
    "die_on_resident_set_size_mb": _count(limits.MAX_MEMORY_MB),
    "max_tasks_per_child": _count(limits.MAX_TASKS_PER_CHILD),
    "tasks_per_process": _count(limits.MAX_TASKS_PER_PROCESS),
    "threads": _count(limits.MAX_THREADS),
    "shutdown_timeout_sec": _seconds(limits.MAX_SHUTDOWN_TIMEOUT_SEC),
    "time_limit_grace_sec": _seconds(limits.MAX_TIME_LIMIT_GRACE_SEC),
    "pickle_hmac_key": _key,
    "imports": _imports,
    "on_worker_startup": _callback,
    "on_worker_shutdown": _callback,
}

_LANNER_MODULE_NAMES: Final[Mapping[str, str]] = {
    "BROKER_URL": "broker",
    "QUEUE_CONFIG": "queue_config",
    "QUEUE_SELECTOR": "queue_selector",
    "RETRY_DELAY_MULTIPLE_SEC": "retry_delay_multiple_sec",
    "RETRY_DELAY_MAX_SEC": "retry_delay_max_sec",
    "DIE_ON_RESIDENT_SET_SIZE_MB": "die_on_resident_set_size_mb",
    "MAX_TASKS_PER_CHILD": "max_tasks_per_child",
    "TASKS_PER_PROCESS": "tasks_per_process",
    "THREADS": "threads",
    "SHUTDOWN_TIMEOUT_SEC": "shutdown_timeout_sec",
    "TIME_LIMIT_GRACE_SEC": "time_limit_grace_sec",
    "PICKLE_HMAC_KEY": "pickle_hmac_key",
    "IMPORTS": "imports",
    "ON_WORKER_STARTUP": "on_worker_startup",
    "ON_WORKER_SHUTDOWN": "on_worker_shutdown",
}
MODULE_NAMES: Final[Mapping[str, str]] = {
    **_LANNER_MODULE_NAMES,
    **{alias: _LANNER_MODULE_NAMES[name] for alias, name in kale.SETTING_ALIASES.items()},
}
"""Settings-module names and the fields they set, Kale's aliases (`lanner.kale`) included."""

ENVIRONMENT_NAMES: Final[Mapping[str, str]] = {
    "LANNER_BROKER": "broker",
    "LANNER_QUEUE_CONFIG": "queue_config",
    "LANNER_QUEUE_SELECTOR": "queue_selector",
    "LANNER_PICKLE_HMAC_KEY": "pickle_hmac_key",
}
"""Environment variables and the fields they set."""


def load_settings(
    *,
    module: str | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build `Settings` from defaults, a settings module, the environment and `overrides`.

    `module` names the settings module (default: `$LANNER_SETTINGS_MODULE`, else Kale's
    `$KALE_SETTINGS_MODULE`, if set); `environ` replaces `os.environ`; `overrides` use field
    names (`broker=...`).
    """
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    module_name = module if module is not None else env.get(SETTINGS_MODULE_ENV)
    if module_name:
        values.update(_module_layer(module_name))
    elif module is None and env.get(KALE_SETTINGS_MODULE_ENV):
        values.update(_module_layer(env[KALE_SETTINGS_MODULE_ENV], kale_style=True))
    values.update(_environment_layer(env))
    values.update(_override_layer(overrides))
    return Settings(**values)  # type: ignore[arg-type]  # every value passed its field's check


def _checked(field: str, value: object, name: str, source: str) -> object:
    try:
        return _CHECKS[field](value, name)
    except ConfigError as error:
        raise ConfigError(error.problem, source=source, field=name) from None


def configured_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment names a broker or a settings module (lanner's or Kale's)."""
    env = os.environ if environ is None else environ
    return any(env.get(name) for name in ("LANNER_BROKER", SETTINGS_MODULE_ENV,
                                          KALE_SETTINGS_MODULE_ENV))  # fmt: skip


def _module_layer(module_name: str, *, kale_style: bool = False) -> dict[str, object]:
    """The settings of a module; `kale_style`: named by KALE_SETTINGS_MODULE, so its
    QUEUE_CONFIG is read as Kale does (working directory, Kale's default file name)."""
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ConfigError(
            f"cannot import the settings module: {type(error).__name__}: {error}",
            source=module_name,
        ) from error
    given = {name: value for name, value in vars(module).items() if _is_setting_name(name)}
    _reject_unknown(given, module_name)
    ignored = sorted(name for name in given if name not in MODULE_NAMES)
    if ignored:
        logger.warning(
            "%s: ignoring Kale settings that lanner does not use: %s",
            module_name,
            ", ".join(ignored),
        )
    for alias, name in kale.SETTING_ALIASES.items():
        if name in given and alias in given:
            raise ConfigError(
                f"set {name} or Kale's {alias}, not both", source=module_name, field=name
            )
    values: dict[str, object] = {}
    for name, value in given.items():
        if name in MODULE_NAMES:
            field = MODULE_NAMES[name]
            values[field] = _checked(field, value, name, module_name)
    if kale_style:
        # Kale opens QUEUE_CONFIG as given, so relative to the working directory.
        values["queue_config"] = os.path.abspath(
            str(values.get("queue_config") or KALE_QUEUE_CONFIG)
        )
    elif values.get("queue_config") is not None:
        values["queue_config"] = _module_relative(str(values["queue_config"]), module)
    return values


def _is_setting_name(name: str) -> bool:
    return name.isupper() and not name.startswith("_")


def _reject_unknown(given: Mapping[str, object], module_name: str) -> None:
    unknown = sorted(
        name for name in given if name not in MODULE_NAMES and not kale.is_ignored_setting(name)
    )
    if not unknown:
        return
    described = [_with_suggestion(name, list(MODULE_NAMES)) for name in unknown]
    raise ConfigError(
        f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(described)}: not a lanner "
        "or Kale setting (prefix helper names with '_' to keep them out of the settings)",
        source=module_name,
        field=unknown[0],
    )


def _with_suggestion(name: str, known: list[str]) -> str:
    """`name`, with the known name it was likely meant as (case aside: a settings module's
    RETRY_DELAY_MULTIPLE_SEC is `retry_delay_multiple_sec` to `load_settings`)."""
    by_folded = {candidate.casefold(): candidate for candidate in known}
    close = difflib.get_close_matches(name.casefold(), list(by_folded), n=1)
    return f"{name} (did you mean {by_folded[close[0]]}?)" if close else name


def _module_relative(path: str, module: ModuleType) -> str:
    if os.path.isabs(path):
        return path
    module_file = getattr(module, "__file__", None)
    if not module_file:
        return os.path.abspath(path)
    return os.path.join(os.path.dirname(os.path.abspath(module_file)), path)


def _environment_layer(environ: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for variable, field in ENVIRONMENT_NAMES.items():
        raw = environ.get(variable)
        if raw:
            values[field] = _checked(field, raw, variable, "environment")
    if "queue_config" in values:
        values["queue_config"] = os.path.abspath(str(values["queue_config"]))
    return values


def _override_layer(overrides: Mapping[str, Any]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, value in overrides.items():
        if name not in _CHECKS:
            raise ConfigError(
                f"unknown setting {_with_suggestion(name, list(_CHECKS))}",
                source="load_settings()",
                field=name,
            )
        values[name] = _checked(name, value, name, "load_settings()")
    if values.get("queue_config") is not None:
        values["queue_config"] = os.path.abspath(str(values["queue_config"]))
    return values

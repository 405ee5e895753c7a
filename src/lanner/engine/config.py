"""The configuration commands (config_get, config_all, config_set, config_unset), their
defaults (`CONFIG_DEFAULTS`), and the config keys a command must check further: a queue's
bounds (`LIMIT_SETTINGS`) and its lock (`<queue>-heartbeat`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lanner import checks
from lanner.checks import names, values
from lanner.engine.capabilities import Capability, Commands
from lanner.records import ConfigValue

CONFIG_DEFAULTS: Final[Mapping[str, ConfigValue]] = {
    "application": "lanner",
    "heartbeat": 60,
    "grace-period": 10,
    "stats-history": 30,
    "histogram-history": 7,
    "jobs-history": 604800,
    "jobs-history-count": 50000,
    "max-job-history": 100,
    "max-worker-age": 86400,
}
"""Defaults of `config_get`. Per-queue keys: `<queue>-heartbeat`, `<queue>-max-concurrency`."""


LIMIT_SETTINGS: Final = (
    "max-items",
    "max-size",
    "max-item-size",
    "max-age",
    "discard-old-when-full",
)
"""LIMITS: config keys `<queue>-<setting>` that bound what a put may add (docs/kestrel.md).

`max-items` jobs and `max-size` bytes of data the queue may hold (not finished); a job whose
data is over `max-item-size` bytes is refused (`PayloadTooLarge`); `max-age` seconds caps
each job's `expires_at` at its put; `discard-old-when-full` 1 makes a put into a full queue
drop waiting jobs from its head, in pop order (`QueueFull` otherwise). 0 or unset: no bound."""


def limit_setting(key: str) -> tuple[str, str] | None:
    """(queue, setting) if `key` sets one of a queue's LIMIT_SETTINGS, else None."""
    for setting in LIMIT_SETTINGS:
        queue, dash, rest = key.rpartition("-" + setting)
        if dash and not rest and names.is_queue_name(queue):
            return queue, setting
    return None


def lease_queue(key: str) -> str | None:
    """The queue whose lock a config key sets (`<queue>-heartbeat`), or None."""
    queue, dash, setting = key.rpartition("-")
    if dash and setting == "heartbeat" and names.is_queue_name(queue):
        return queue
    return None


class ConfigCommands(Commands):
    """The commands that read and change the store's settings."""

    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None:
        return self._config_get(checks.config_key(key))

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        """The defaults merged with what was set."""
        return self._config_all()

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None:
        setting = checks.config_set(key, value)
        if setting.key.endswith("-max-concurrency"):
            self._require(Capability.MAX_CONCURRENCY, "config_set(<queue>-max-concurrency)")
        limit = limit_setting(setting.key)
        if limit is not None:
            self._require(Capability.LIMITS, f"config_set({setting.key!r})")
            checks.limit_value(limit[1], setting.value)
        if lease_queue(setting.key) is None:
            self._require(Capability.CONFIG, f"config_set({setting.key!r})")
        if lease_queue(setting.key) is not None or setting.key in checks.LEASE_SETTINGS:
            checks.lease_value(setting.key, setting.value)
        self._config_set(setting, values.now(now))

    def config_unset(self, key: str, *, now: float | None = None) -> None:
        self._config_unset(checks.config_key(key), values.now(now))

"""Kale's names that lanner understands, so that Kale settings and code work unchanged.

The tables here translate; nothing in them is lanner's own behaviour. Kale's module paths
have lanner counterparts, so Kale code changes its import lines only: `lanner.task`,
`lanner.exceptions`, `lanner.worker` (`Worker().run()`), `lanner.test_utils`,
`lanner.publisher` and `lanner.message`; KALE_SETTINGS_MODULE is read too (settings.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

SELECTOR_PATHS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "kale.queue_selector.Random": "random",
        "kale.queue_selector.Lottery": "lottery",
        "kale.queue_selector.HighestPriorityFirst": "highest-priority-first",
        "kale.queue_selector.HighestPriorityLottery": "highest-priority-lottery",
        "kale.queue_selector.LotteryLottery": "lottery-lottery",
        "kale.queue_selector.ReducedLottery": "reduced-lottery",
    }
)
"""Kale's `QUEUE_SELECTOR` class paths, and the lanner selector each stands for."""

SETTING_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {"SQS_MAX_TASK_DELAY_SEC": "RETRY_DELAY_MAX_SEC"}
)
"""Kale's settings-module names for lanner settings that lanner names otherwise."""

IGNORED_SETTINGS: Final = frozenset(
    {
        "COMPRESSOR",
        "DECOMPRESSOR",
        "ENABLE_DEAD_LETTER_QUEUE",
        "MESSAGE_QUEUE_ENDPOINT_URL",
        "MESSAGE_QUEUE_PROXY_HOST",
        "MESSAGE_QUEUE_PROXY_PORT",
        "MESSAGE_QUEUE_USE_PROXY",
        "PICKLE_PROTOCOL",
        "PROPERLY_CONFIGURED",
        "PUBLISHER_STR_FUNC",
        "QUEUE_CLASS",
        "RESET_TIMEOUT_THRESHOLD",
        "SQS_QUEUE_TAG_FUNCTION",
        "SQS_TASK_SIZE_LIMIT",
        "TASK_MAPPER",
        "TIMESTAMP_FUNC",
        "USE_DEAD_LETTER_QUEUE",
        "UTIL_CRYPT_CIPHER",
    }
)
"""Kale's settings that lanner does not use (ignored with a warning), besides `AWS_*`."""


def is_ignored_setting(name: str) -> bool:
    """Whether a settings-module name is one of Kale's that lanner ignores."""
    return name in IGNORED_SETTINGS or name.startswith("AWS_")

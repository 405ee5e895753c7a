"""Moving a job from one partition to another (a put into a queue of another partition,
a complete that sends the job on to one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lanner import checks
from lanner.engine import Capability
from lanner.errors import Unsupported

if TYPE_CHECKING:
    from lanner.engines.redis.cluster.engine import RedisClusterEngine


def move(
    engine: RedisClusterEngine,
    source: str,
    target: str,
    job: Any,
    checked: checks.Put,
    command: str,
) -> str:
    raise Unsupported(
        engine.name, command, Capability.LOOKUP.value, "moving a job across partitions"
    )


def complete_to(engine: RedisClusterEngine, source: str, command: checks.Complete) -> str:
    raise Unsupported(
        engine.name, "complete", Capability.LOOKUP.value, "moving a job across partitions"
    )

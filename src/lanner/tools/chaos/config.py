"""What a chaos run is asked to do: the store, the workload, the faults and their schedule.

`ChaosConfig.check()` turns every impossible combination into one `ChaosError` line
(a write lock on Redis, a Redis restart without a server the harness controls, ...),
before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from lanner.tools.chaos.brokers import ChaosError, RestartableRedis
from lanner.tools.chaos.workload import WorkloadSpec

REDIS_SCHEMES: Final = ("redis://", "rediss://")
FRACTIONS: Final = (
    "stop_at",
    "supervisor_kill_at",
    "supervisor_term_at",
    "restart_at",
    "outage_at",
    "lock_at",
)


@dataclass(frozen=True)
class FaultPlan:
    """Which faults a run does, and when: `*_at` is the fraction of normal jobs ended."""

    kill_every: float | None = None  # seconds between kill -9s of a worker process
    kill_first: float | None = None  # seconds before the first (default: kill_every)
    kill_idle: bool = False  # also kill workers outside a job (blocked in a pop)
    stop_at: float | None = None
    stop_for: float | None = None  # default: lease + grace + 2 s
    supervisor_kill_at: float | None = None
    supervisor_term_at: float | None = None
    restart_at: float | None = None  # Redis: kill -9 and start again at once
    outage_at: float | None = None  # Redis: away for outage_for; SQLite: write lock held
    outage_for: float = 60.0
    lock_at: float | None = None  # SQLite: write lock held lock_for by another process
    lock_for: float = 3.0
    kill_in_lock: bool = True  # kill a worker 0.3 s into the write lock


@dataclass(frozen=True)
class ChaosConfig:
    engine: str = "sqlite"  # "sqlite" or "redis"
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    faults: FaultPlan = field(default_factory=FaultPlan)
    broker: str | None = None  # an external store's URL: no broker faults on it
    redis: RestartableRedis | None = None  # a server the caller owns (and the harness kills)
    url_options: str = ""  # query options for the pool's URL, e.g. "busy_timeout=1"
    grace: float | None = None  # the engine's grace-period (None: leave it)
    drain_timeout: float = 300.0  # seconds for the work to settle once the faults are done
    folder: Path | None = None  # keep the run's files here (None: a temporary folder)
    seed: int | None = None

    @property
    def engine_name(self) -> str:
        """The engine the run works on: `engine`, or the one `broker` names."""
        if self.broker is None:
            return self.engine
        return "redis" if self.broker.startswith(REDIS_SCHEMES) else "sqlite"

    def check(self) -> None:
        """ChaosError saying what is wrong with the configuration, if anything."""
        try:
            self.workload.check()
        except ValueError as error:
            raise ChaosError(str(error)) from None
        if self.broker is not None and not self.broker.startswith((*REDIS_SCHEMES, "sqlite://")):
            raise ChaosError(
                f"the harness runs on sqlite:// or redis:// stores, not {self.broker!r}"
            )
        if self.broker is not None and self.redis is not None:
            raise ChaosError("give a broker URL or a Redis server, not both")
        engine, plan = self.engine_name, self.faults
        if engine not in ("sqlite", "redis"):
            raise ChaosError(f"unknown engine {engine!r} (sqlite or redis)")
        if engine == "sqlite" and plan.restart_at is not None:
            raise ChaosError("a broker restart needs the Redis engine")
        if engine == "redis" and plan.lock_at is not None:
            raise ChaosError("a write lock needs the SQLite engine")
        broker_faults = plan.restart_at is not None or plan.outage_at is not None
        if engine == "redis" and self.broker is not None and broker_faults:
            raise ChaosError("Redis restarts and outages need a redis-server the harness "
                             "controls (--engine redis, not --broker)")  # fmt: skip
        for name in FRACTIONS:
            value = getattr(plan, name)
            if value is not None and not 0 <= value <= 1:
                raise ChaosError(f"{name} is a fraction of the jobs, from 0 to 1, not {value}")

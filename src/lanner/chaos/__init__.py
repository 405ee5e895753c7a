"""Chaos runs: a real `lanner worker` pool under faults, and an account of every job.

    workload    the task module (normal and poison tasks), its queue file, publishing
    ledger      the lines tasks append (`start`, `end`, ...), read as the file grows
    procs       processes as /proc shows them: children, sessions, markers, signals
    brokers     the stores from outside: a killable redis-server, an SQLite write lock
    pool        `lanner worker` subprocesses, and a `lanner status` reader beside them
    faults      faults as state machines on their own schedules; those done to workers
    outages     faults done to the supervisor and the store
    settle      when the work has settled; how each poison job ended
    report      the accounting: lost, dup, redelivery, ...; the figure line and JSON
    config      what a run is asked to do (`ChaosConfig`, `FaultPlan`), checked
    run         one run from set-up to report (`run_chaos`)
    cli         `lanner chaos`

Only lanner's public API (`import lanner`) and its command line are used: the harness
sees lanner as a user and an operator would.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lanner.chaos.brokers import ChaosError, RedisServer
    from lanner.chaos.config import ChaosConfig, FaultPlan
    from lanner.chaos.report import Report
    from lanner.chaos.run import run_chaos
    from lanner.chaos.workload import POISONS, WorkloadSpec

_LAZY = {
    "POISONS": "lanner.chaos.workload",
    "WorkloadSpec": "lanner.chaos.workload",
    "ChaosConfig": "lanner.chaos.config",
    "FaultPlan": "lanner.chaos.config",
    "run_chaos": "lanner.chaos.run",
    "ChaosError": "lanner.chaos.brokers",
    "RedisServer": "lanner.chaos.brokers",
    "Report": "lanner.chaos.report",
}
"""Names loaded on first use, so that `lanner --help` does not load the harness."""

__all__ = [
    "POISONS",
    "ChaosConfig",
    "ChaosError",
    "FaultPlan",
    "RedisServer",
    "Report",
    "WorkloadSpec",
    "run_chaos",
]


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'lanner.chaos' has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

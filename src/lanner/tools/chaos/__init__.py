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
    from lanner.tools.chaos.brokers import ChaosError, RedisServer
    from lanner.tools.chaos.config import ChaosConfig, FaultPlan
    from lanner.tools.chaos.report import Report
    from lanner.tools.chaos.run import run_chaos
    from lanner.tools.chaos.workload import POISONS, WorkloadSpec

_LAZY = {
    "POISONS": "lanner.tools.chaos.workload",
    "WorkloadSpec": "lanner.tools.chaos.workload",
    "ChaosConfig": "lanner.tools.chaos.config",
    "FaultPlan": "lanner.tools.chaos.config",
    "run_chaos": "lanner.tools.chaos.run",
    "ChaosError": "lanner.tools.chaos.brokers",
    "RedisServer": "lanner.tools.chaos.brokers",
    "Report": "lanner.tools.chaos.report",
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
            raise AttributeError(f"module 'lanner.tools.chaos' has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

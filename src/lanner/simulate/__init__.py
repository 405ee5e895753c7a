"""A discrete-event simulator of lanner's (Kale's) workers, for capacity planning and for
designing queue selectors: `lanner simulate SCENARIO.yaml`, or from Python:

    scenario = load_scenario("examples/busy-hour.yaml")
    result = simulate(scenario, "reduced-lottery")     # or "static"
    print(result.mean_wait, result.queue("high_priority").wait.p99)

Modules: `scenario` (the data), `loader` (YAML), `arrivals` and `distributions` (what
arrives when and runs how long), `core` (the event loop), `results`, `runner` (several
runs on several cores), `sweep` (policies against static, over loads), `seeds` (policies
against each other, paired over seeds), `fromengine` (a scenario from an engine's
statistics), `report` and `plot` (tables and figures), `cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lanner.simulate.core import simulate
    from lanner.simulate.loader import load_scenario, parse_scenario
    from lanner.simulate.results import QueueResult, RunResult, WaitSummary
    from lanner.simulate.scenario import STATIC, Costs, Scenario, SimQueue, Window

__all__ = [
    "STATIC",
    "Costs",
    "QueueResult",
    "RunResult",
    "Scenario",
    "SimQueue",
    "WaitSummary",
    "Window",
    "load_scenario",
    "parse_scenario",
    "simulate",
]

# Imported on first use, so that `lanner --help` does not load the simulator.
_HOMES = {
    "simulate": "core",
    "load_scenario": "loader",
    "parse_scenario": "loader",
    "QueueResult": "results",
    "RunResult": "results",
    "WaitSummary": "results",
    "STATIC": "scenario",
    "Costs": "scenario",
    "Scenario": "scenario",
    "SimQueue": "scenario",
    "Window": "scenario",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lanner.simulate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"lanner.simulate.{home}"), name)

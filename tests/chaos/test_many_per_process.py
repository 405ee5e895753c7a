"""Worker processes that run many jobs at once (`lanner worker -t 10`: async tasks sharing
each process's event loop, or sync ones in `--threads 5`), killed with several jobs in
flight and poisoned beside them.

A death with several jobs in flight charges none of them: each runs again, alone, so a
later death is its own. Nothing is lost, no innocent job ends in a failure group, and a
poison job still ends in its own (docs/reliability.md, "Innocent neighbours are told
apart from a poison job").
"""

from __future__ import annotations

import pytest

from lanner.tools.chaos import FaultPlan

from .conftest import CHEAP_POISONS, ENGINES, Chaos, assert_sound

pytestmark = pytest.mark.slow

DEATHS = ("exit", "segv")


@pytest.mark.parametrize(
    ("engine", "kind", "threads"),
    [*((engine, "async", 1) for engine in ENGINES), ("sqlite", "sync", 5)],
)
def test_processes_killed_with_many_jobs_in_flight_charge_no_innocent_job(
    chaos: Chaos, engine: str, kind: str, threads: int
) -> None:
    # 2 processes of 10 jobs of 0.1 s each: a kill -9 every 0.7 s lands on a process
    # inside several jobs, and the poison jobs that end their process (os._exit, a
    # segfault) run beside innocent ones before they run alone.
    report = chaos(engine, FaultPlan(kill_every=0.7, kill_first=0.3), jobs=300, sleep=0.1,
                   tasks_per_process=10, kind=kind, threads=threads)  # fmt: skip
    details = f"{report.figure_line()}\nproblems: {report.problems()}\nfiles: {report.folder}"
    assert (report.kind, report.threads) == (kind, threads), details
    assert report.kills >= 2, details
    assert max(report.in_flight_at_kills) >= 2, f"{report.in_flight_at_kills}\n{details}"
    assert report.lost == 0, details
    assert report.innocent_failed == 0, report.innocent_failures
    assert {p.kind for p in report.poison} == set(CHEAP_POISONS), report.poison
    for outcome in report.poison:
        if outcome.kind in DEATHS:
            assert (outcome.state, outcome.group) == ("failed", "lanner-worker-died"), outcome
    assert_sound(report)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_process_stopped_inside_many_jobs_repeats_those_alone(chaos: Chaos, engine: str) -> None:
    # SIGSTOP of a process inside several of its 10 async jobs, for lease + grace + 2 s:
    # the jobs it ran go to the other process within lease + grace; only those repeat.
    report = chaos(engine, FaultPlan(stop_at=0.3), jobs=300, sleep=0.05, tasks_per_process=10)
    details = f"{report.figure_line()}\nproblems: {report.problems()}\nfiles: {report.folder}"
    assert report.stops == 1, details
    stop = report.incident("stop")
    assert stop["moment"] == "inside", stop
    assert stop["in_flight"] >= 1, stop
    assert_sound(report)
    worst = report.stop_redelivery_max
    if worst is not None and not report.stop_blocked:
        assert worst <= report.lease + report.grace + 2.0, sorted(report.stop_redelivery)[-3:]

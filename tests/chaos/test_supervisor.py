"""The supervisor itself killed or stopped mid-work, and a new one started.

Each test runs a real `lanner worker` under one fault (see conftest.py) and says which
numbered fault of issue 10 it proves.
"""

from __future__ import annotations

import pytest

from lanner.tools.chaos import FaultPlan

from .conftest import Chaos, assert_sound

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_supervisor_killed_while_another_process_reads_the_store(chaos: Chaos, engine: str) -> None:
    # Issue 10 fault 1: kill -9 of the supervisor while a worker has just started a 1.2 s job
    # of a 4-job batch and `lanner status --json` runs in a loop. The orphans finish their
    # job and give the rest back; what they did must be in the store, then a new pool runs.
    report = chaos(engine, FaultPlan(supervisor_kill_at=0.0), jobs=8, sleep=1.2, batch_size=4)
    details = report.incident("supervisor-kill")
    assert details["orphans"] >= 1, details
    assert details["reader_runs"] >= 2, details
    assert details["orphan_commits_lost"] == 0, details
    assert details["orphan_jobs_held"] == 0, details
    assert_sound(report)


@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_supervisor_sigterm_mid_work_then_a_new_pool(chaos: Chaos, engine: str) -> None:
    # Issue 10 faults 1 and 6, their shutdown side (held before the fixes, which change how a
    # pool opens the store and ends its workers): SIGTERM mid-work is a warm shutdown (exit
    # status 0, every job given back, none repeated), then a new pool finishes the work.
    report = chaos(engine, FaultPlan(supervisor_term_at=0.3))
    details = report.incident("supervisor-term")
    assert details["exit_status"] == 0, details
    assert details["jobs_held"] == 0, details
    assert report.dup == 0, report.figure_line()
    assert_sound(report)

"""The chaos harness's accounting when a worker process runs many jobs at once: what the
ledger shows each process inside, the jobs a kill hit, and the bound on repeats; and its
one-shot faults, one at a time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import cast

from lanner.tools.chaos import Report
from lanner.tools.chaos.faults import Harness, Incident, Kill, StopChild
from lanner.tools.chaos.ledger import Ledger
from lanner.tools.chaos.report import in_flight_at_kills, poison_hits, redeliveries


def ledger_of(tmp_path: Path, *lines: str) -> Ledger:
    path = tmp_path / "ledger.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    ledger = Ledger(path)
    ledger.update()
    return ledger


def test_a_process_is_inside_every_job_it_started_and_has_not_ended(tmp_path: Path) -> None:
    ledger = ledger_of(
        tmp_path,
        "start a 10 1.0",
        "start b 10 1.1",
        "pstart p 10 1.2",
        "end a 10 1.3",
    )
    assert ledger.running_jobs(10) == ["b"]
    assert ledger.running_poison(10)
    assert ledger.inside(10)
    assert not ledger.inside(11)


def test_a_job_started_elsewhere_leaves_the_process_that_wrote_no_end(tmp_path: Path) -> None:
    # A task stopped by its time limit or a lost lock writes no end line; its job runs again.
    ledger = ledger_of(tmp_path, "start a 10 1.0", "start a 11 5.0", "end a 10 5.1")
    assert ledger.running_jobs(10) == []
    assert ledger.running_jobs(11) == ["a"]  # the end of the stale run is not this one's


def test_a_kill_hit_every_job_in_flight_and_each_is_timed_to_its_next_start(
    tmp_path: Path,
) -> None:
    ledger = ledger_of(
        tmp_path,
        "start a 10 1.0",
        "start b 10 1.1",
        "start c 10 1.2",
        "end a 10 1.3",
        "start b 11 2.5",  # after the kill at 2.0
        "end b 11 2.6",
        "start d 10 3.0",  # after the kill: not in flight at it
    )
    kills = [Kill(10, 2.0, "every 1 s"), Kill(1, 2.1, "supervisor")]
    in_flight = in_flight_at_kills(ledger, kills)
    assert [(kill.pid, jids) for kill, jids in in_flight] == [(10, ["b", "c"])]
    assert redeliveries(ledger, in_flight) == [0.5, math.inf]  # c never started again


def test_repeats_are_bounded_by_the_jobs_a_process_runs_at_once(tmp_path: Path) -> None:
    ledger = ledger_of(
        tmp_path, "pstart p1 10 1.0", "pstart p1 11 2.0", "pstart p2 11 3.0", "pend p2 11 3.1"
    )
    assert poison_hits(ledger, {"p1": "segv", "p2": "raise"}) == 2  # raise hits no one

    report = Report("sqlite", 100, tasks_per_process=10, kills=3, stops=1, poison_hits=2,
                    final_exit=0)  # fmt: skip
    assert report.dup_bound == 10 * (3 + 1) + 9 * 2
    report.dup = report.dup_bound
    assert report.problems() == []
    report.dup += 1
    [problem] = report.problems()
    assert problem.startswith("dup 59 > 58: each of 3 kill(s) and 1 stop(s) may repeat the 10")

    one_at_a_time = Report("sqlite", 100, kills=3, stops=1, poison_hits=2)
    assert one_at_a_time.dup_bound == 4  # kills + stops: the poison ran alone


def test_an_innocent_job_in_a_failure_group_is_a_problem() -> None:
    report = Report("redis", 10, tasks_per_process=5, final_exit=0, innocent_failed=1,
                    innocent_failures=["n1 lanner-worker-died: worker process died"])  # fmt: skip
    assert report.problems() == [
        "1 innocent job(s) ended in a failure group: n1 lanner-worker-died: worker process died"
    ]
    assert "t=5 " in report.figure_line()
    assert "innocent_failed=1 " in report.figure_line()


class HalfDone:
    """A run half done, as a one-shot fault sees it."""

    def __init__(self) -> None:
        self.incidents: list[Incident] = []

    def progress(self) -> float:
        return 0.5


def test_a_one_shot_fault_waits_for_the_one_under_way_to_end() -> None:
    run = HalfDone()
    stop = StopChild(0.2)
    assert stop.due(cast(Harness, run))
    run.incidents.append(Incident("redis-outage", started=1.0))
    assert not stop.due(cast(Harness, run))
    run.incidents[0].ended = 61.0
    assert stop.due(cast(Harness, run))


def test_a_kill_before_the_ledger_line_is_known_from_the_jobs_history(tmp_path: Path) -> None:
    # The harness knows which process ran a poison job from the job's own history too:
    # a kill can land between the pop and the task's first ledger line.
    from lanner import open_engine
    from lanner.tools.chaos.settle import _popped_by

    engine = open_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    engine.put("q", "jid-1", "t.Task", "{}")
    assert len(engine.pop("q", "host.example-4242")) == 1
    engine.fail("jid-1", "host.example-4242", "lanner-worker-died", "killed", "{}")
    job = engine.get("jid-1")
    assert job is not None
    assert _popped_by(job) == {4242}
    engine.close()

"""`lanner stats QUEUE`: a day's wait and run histograms, on a SQLite store whose jobs ran
on a driven clock (`now=`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from lanner import Engine
from lanner.checks.names import QUEUE_NAME_RULE
from lanner.commands import register_admin

KLASS = "myapp.tasks.Work"
T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def worked(engine: Engine) -> Engine:
    """A day of `emails`: waits of 3 s (four jobs) and 12.5 min (one); runs of 5 s (two),
    2 min 5 s (one) and 1 s (one); one job failed."""
    for jid in ("a1", "a2", "a3", "a4", "b"):
        engine.put("emails", jid, KLASS, now=T0)
    popped = engine.pop("emails", "w1", count=4, now=T0 + 3)
    assert sorted(job.jid for job in popped) == ["a1", "a2", "a3", "a4"]
    engine.complete("a1", "w1", "emails", now=T0 + 8)
    engine.complete("a2", "w1", "emails", now=T0 + 8)
    engine.complete("a3", "w1", "emails", now=T0 + 128)
    engine.fail("a4", "w1", "SMTPError", "refused", now=T0 + 10)
    [job] = engine.pop("emails", "w1", now=T0 + 750)
    assert job.jid == "b"
    engine.complete("b", "w1", "emails", now=T0 + 751)
    return engine


def cli() -> click.Group:
    group = click.Group("lanner")
    register_admin(group)
    return group


def run(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli(), ["stats", *args, "--broker", url])


def document(url: str, *args: str) -> Any:
    import json

    result = run(url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_has_counts_percentiles_and_non_empty_buckets(url: str, worked: Engine) -> None:
    found = document(url, "emails", "--date", "2026-11-20")
    assert (found["queue"], found["date"]) == ("emails", "2026-11-20")
    assert (found["failed"], found["failures"], found["retries"]) == (1, 1, 0)
    wait = found["wait"]
    assert wait["count"] == 5
    assert wait["mean"] == pytest.approx((4 * 3 + 750) / 5)
    assert [(b["label"], b["low"], b["high"], b["count"]) for b in wait["buckets"]] == [
        ("3s", 3, 4, 4),
        ("12m", 720, 780, 1),
    ]
    assert wait["p50"] == pytest.approx(3 + 2.5 / 4)  # rank 2.5 of 5, in [3, 4)
    assert wait["p95"] == pytest.approx(720 + 60 * 0.75)  # rank 4.75: into the 12m bucket
    run_ = found["run"]
    assert run_["count"] == 4
    assert [(b["label"], b["count"]) for b in run_["buckets"]] == [("1s", 1), ("5s", 2), ("2m", 1)]
    assert run_["p50"] == pytest.approx(5.5)  # rank 2: half through the 5s bucket


def test_bars_numbers_and_labels(url: str, worked: Engine) -> None:
    result = run(url, "emails", "--date", "2026-11-20")
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.output.splitlines()]
    assert lines[0] == "emails on 2026-11-20 (UTC)"
    assert [line.split() for line in lines[1:4]] == [
        ["failed", "1"],
        ["failures", "1"],
        ["retries", "0"],
    ]
    wait = lines.index("wait (put or due, to popped)")
    run_ = lines.index("run (popped, to completed)")
    assert lines[wait + 1].split() == [
        "count", "5", "mean", "2.5m", "std", "5.6m", "p50", "3.62s", "p95", "12.8m", "p99", "12.9m",
    ]  # fmt: skip
    assert lines[wait + 2].split() == ["3s", "█" * 40, "4"]
    assert lines[wait + 3].split() == ["12m", "█" * 10, "1"]
    assert [line.split()[0] for line in lines[run_ + 2 :] if line] == ["1s", "5s", "2m"]
    assert lines[run_ + 3].split() == ["5s", "█" * 40, "2"]
    assert lines[run_ + 4].split() == ["2m", "█" * 20, "1"]


def test_a_day_without_jobs_says_so(url: str, worked: Engine) -> None:
    result = run(url, "emails", "--date", "2026-11-21")
    assert result.exit_code == 0, result.output
    assert result.output.count("nothing measured") == 2
    empty = document(url, "emails", "--date", "2026-11-21")
    assert empty["wait"] == {
        "count": 0, "mean": 0.0, "std": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "buckets": [],
    }  # fmt: skip


def test_today_is_the_default(url: str, engine: Engine) -> None:
    engine.put("emails", "now", KLASS)
    engine.pop("emails", "w1")
    found = document(url, "emails")
    assert found["date"] == datetime.now(UTC).strftime("%Y-%m-%d")
    assert found["wait"]["count"] == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("bad/queue",), QUEUE_NAME_RULE),
        (("emails", "--date", "20-11-2026"), "Invalid value for '--date'"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    url: str, engine: Engine, args: tuple[str, ...], says: str
) -> None:
    result = run(url, *args)
    assert result.exit_code in (1, 2)
    assert says in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_an_engine_without_stats_is_a_clear_error(
    url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lanner.engine import Capability
    from lanner.engines.sqlite.engine import SQLiteEngine

    without = frozenset(SQLiteEngine.capabilities) - {Capability.STATS}
    monkeypatch.setattr(SQLiteEngine, "capabilities", without)
    result = run(url, "emails")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: the sqlite engine keeps no per-day statistics (no 'stats' capability)"
    )


def test_sqs_keeps_no_statistics(sqs_fresh_url: str, url: str) -> None:
    result = run(sqs_fresh_url, "emails")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: the sqs engine keeps no per-day statistics (no 'stats' capability)"
    )

"""`lanner.metrics.engine`: a store's state as Prometheus metrics, on a SQLite store whose
jobs ran on a driven clock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lanner import Engine, open_engine
from lanner.engine import Capability
from lanner.errors import EngineUnavailable
from lanner.metrics.engine import EngineCollector, render

KLASS = "myapp.tasks.Work"
T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC).timestamp()


@pytest.fixture(params=["sqlite", "redis"])
def engine(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Engine]:
    if request.param == "redis":
        import redis

        url: str = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
    else:
        url = f"sqlite:///{tmp_path}/x.db"
    opened = open_engine(url)
    yield opened
    opened.close()


@pytest.fixture
def worked(engine: Engine) -> Engine:
    """`emails`: three jobs waited 3 s and ran 5 s, one failed (group SMTPError), one is
    waiting and one scheduled; `reports` is paused with one job waiting."""
    for jid in ("a1", "a2", "a3", "a4", "a5"):
        engine.put("emails", jid, KLASS, now=T0)
    engine.put("emails", "later", KLASS, delay=3600, now=T0)
    for job in engine.pop("emails", "w1", count=4, now=T0 + 3)[:3]:
        engine.complete(job.jid, "w1", "emails", now=T0 + 8)
    engine.fail("a4", "w1", "SMTPError", "refused", now=T0 + 8)
    engine.put("reports", "r1", KLASS, now=T0)
    engine.pause(["reports"], now=T0)
    return engine


def scrape(engine: Engine, **options: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape, by name and sorted labels."""
    collector = EngineCollector(engine, clock=lambda: T0 + 10, **options)
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_queue_counts_pauses_failures_and_workers(worked: Engine) -> None:
    found = scrape(worked)
    assert found["lanner_engine_up", ()] == 1
    jobs = {
        (dict(labels)["queue"], dict(labels)["state"]): value
        for (name, labels), value in found.items()
        if name == "lanner_queue_jobs"
    }
    assert jobs == {
        **{("emails", s): 0 for s in ("running", "stalled", "depends", "recurring")},
        ("emails", "waiting"): 1,
        ("emails", "scheduled"): 1,
        **{("reports", s): 0 for s in ("running", "stalled", "depends", "recurring")},
        ("reports", "waiting"): 1,
        ("reports", "scheduled"): 0,
    }
    assert found["lanner_queue_paused", (("queue", "emails"),)] == 0
    assert found["lanner_queue_paused", (("queue", "reports"),)] == 1
    assert found["lanner_failed_jobs", (("group", "SMTPError"),)] == 1
    assert found["lanner_workers", ()] == 1


def test_todays_timings_are_summaries_with_quantiles(worked: Engine) -> None:
    found = scrape(worked)
    emails = (("queue", "emails"),)
    assert found["lanner_queue_wait_seconds_count", emails] == 4
    assert found["lanner_queue_wait_seconds_sum", emails] == pytest.approx(12)
    assert found["lanner_queue_run_seconds_count", emails] == 3
    assert found["lanner_queue_run_seconds_sum", emails] == pytest.approx(15)
    assert found["lanner_queue_run_seconds", (("quantile", "0.5"), *emails)] == pytest.approx(5.5)
    assert found["lanner_queue_wait_seconds", (("quantile", "0.99"), *emails)] == pytest.approx(
        3.99
    )
    assert found["lanner_queue_run_seconds_count", (("queue", "reports"),)] == 0


def test_a_scrape_costs_a_bounded_number_of_engine_calls(
    worked: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: Counter[str] = Counter()
    for name in ("queues", "failed_groups", "workers", "stats", "queue_counts", "jobs"):
        method = getattr(worked, name)

        def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(worked, name, counted)
    scrape(worked)
    assert calls == {"queues": 1, "failed_groups": 1, "workers": 1, "stats": 2}
    calls.clear()
    found = scrape(worked, max_stats_queues=1)
    assert calls["stats"] == 1
    assert ("lanner_queue_run_seconds_count", (("queue", "reports"),)) not in found
    calls.clear()
    scrape(worked, max_stats_queues=0)
    assert calls == {"queues": 1, "failed_groups": 1, "workers": 1}


def test_what_the_engine_lacks_is_left_out(worked: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    lacking = {Capability.PAUSE, Capability.FAILURES, Capability.WORKERS, Capability.STATS}
    monkeypatch.setattr(
        type(worked), "capabilities", frozenset(type(worked).capabilities) - lacking
    )
    names = {name for name, _ in scrape(worked)}
    assert names == {"lanner_engine_up", "lanner_queue_jobs"}


def test_a_store_that_is_away_is_up_0(worked: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def away(**kwargs: Any) -> None:
        raise EngineUnavailable("the store is away")

    monkeypatch.setattr(worked, "queues", away)
    assert scrape(worked) == {("lanner_engine_up", ()): 0}


def test_render_is_one_scrape_with_its_content_type(worked: Engine) -> None:
    body, content_type = render(worked)
    assert content_type.startswith("text/plain; version=")
    text = body.decode()
    assert "# TYPE lanner_queue_jobs gauge" in text
    assert 'lanner_queue_jobs{queue="reports",state="waiting"} 1.0' in text
    assert "# TYPE lanner_queue_run_seconds summary" in text


def test_registering_the_collector_calls_no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"engine.{name} used at registration")

    from prometheus_client import CollectorRegistry

    CollectorRegistry().register(EngineCollector(Untouchable()))  # type: ignore[arg-type]


def test_on_sqs_only_the_queues_are_there(sqs_fresh_url: str) -> None:
    with open_engine(sqs_fresh_url) as sqs:
        sqs.put("emails", "a1", KLASS)
        found = scrape(sqs)
    assert {name for name, _ in found} == {"lanner_engine_up", "lanner_queue_jobs"}
    assert found["lanner_queue_jobs", (("queue", "emails"), ("state", "waiting"))] == 1

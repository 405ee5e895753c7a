"""Flow control on SQS, against moto's SQS server: a fair key is the messages' MessageGroupId
(SQS's fair queues), kept whenever the job is sent again; every control SQS cannot hold
(rate limits, concurrency keys, debounce, schedules) is refused in one line naming the
option and the engine, before anything is sent.

moto accepts MessageGroupId on standard queues and gives it back with the message; it
does not reorder deliveries as AWS's fair queues do, so what is tested here is what lanner
sends (the order SQS then chooses is SQS's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from lanner import App, Debounce, Flow, NewJob, RateLimit, Unsupported
from lanner.engines.sqs.engine import SQSEngine
from lanner.engines.sqs.messages import decode, group_id
from lanner.queues import QueueConfig
from lanner.schedules import register
from lanner.settings import Settings
from lanner.task import Task

from .conftest import Raw


def groups(raw: Raw, queue: str, count: int = 10) -> dict[str, str | None]:
    """jid -> MessageGroupId of the messages `queue` holds, looked at without a lock."""
    url = raw.url(raw.prefix + queue)
    reply = raw.client.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=count,
        VisibilityTimeout=0,
        MessageSystemAttributeNames=["MessageGroupId"],
    )
    return {
        decode(m["Body"]).jid: m.get("Attributes", {}).get("MessageGroupId")
        for m in reply.get("Messages", [])
    }


def test_a_fair_key_is_sent_as_the_message_group_id(engine: SQSEngine, raw: Raw) -> None:
    engine.put_many(
        [
            NewJob("q", "a1", "Task", flow=Flow(fair_key="tenant-a")),
            NewJob("q", "b1", "Task", flow=Flow(fair_key="tenant-b")),
            NewJob("q", "plain", "Task"),
        ]
    )
    engine.put("q", "a2", "Task", delay=1, flow=Flow(fair_key="tenant-a"))
    assert groups(raw, "q") == {"a1": "tenant-a", "b1": "tenant-b", "plain": None}
    assert engine.requests["SendMessageBatch"] == 2


def test_a_key_outside_sqss_rule_is_sent_as_its_digest_and_comes_back_whole(
    engine: SQSEngine, raw: Raw
) -> None:
    key = "ACME Corp, Zürich"  # a space and a letter SQS's MessageGroupId does not take
    digest = "~" + hashlib.sha256(key.encode()).hexdigest()
    engine.put("q", "j1", "Task", flow=Flow(fair_key=key))
    assert groups(raw, "q") == {"j1": digest}
    [job] = engine.pop("q", "w1")
    assert job.jid == "j1"
    assert engine.receipts.held("j1", "w1", "test").body.fair == key


@pytest.mark.parametrize(
    ("key", "group"),
    [
        ("tenant-7", "tenant-7"),
        ("a" * 128, "a" * 128),
        ("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"),
        ("a" * 129, None),
        ("~tenant", None),  # '~' first marks a digest: a key may not look like one
        ("two words", None),
        ("é", None),
    ],
)
def test_a_group_id_is_the_key_where_sqs_takes_it(key: str, group: str | None) -> None:
    made = group_id(key)
    assert made == (group or "~" + hashlib.sha256(key.encode()).hexdigest())
    assert 1 <= len(made) <= 128


def test_a_job_sent_again_keeps_its_group(engine: SQSEngine, raw: Raw) -> None:
    engine.put_many([NewJob("q", f"j{i}", "Task", flow=Flow(fair_key="k")) for i in range(3)])
    jobs = engine.pop("q", "w1", count=3)
    assert sorted(job.jid for job in jobs) == ["j0", "j1", "j2"]
    engine.release(["j0"], "w1", "q")
    engine.retry("j1", "q", "w1", group="Boom", message="boom")
    engine.complete("j2", "w1", "q", next="next")
    assert groups(raw, "q") == {"j0": "k", "j1": "k"}
    assert groups(raw, "next") == {"j2": "k"}


# -- through an App -------------------------------------------------------------------------


@pytest.fixture
def app(sqs_fresh_url: str) -> Iterator[App]:
    made = App(
        sqs_fresh_url,
        settings=Settings(broker=sqs_fresh_url),
        queues=[QueueConfig("limited", rate_limit="10/s")],
    )
    yield made
    made.close()


def test_a_tasks_fair_key_groups_its_runs(app: App, raw: Raw) -> None:
    @app.task(queue="imports", fair_key=lambda tenant, **_: f"tenant-{tenant}")
    def sqs_import_row(tenant: int, row: int) -> None: ...

    first = sqs_import_row.delay(1, 1)
    second = sqs_import_row.delay(2, 1)
    assert groups(raw, "imports") == {first: "tenant-1", second: "tenant-2"}


def refused_in_one_line(app: App, publish: Any, option: str) -> str:
    with pytest.raises(Unsupported) as refused:
        publish()
    text = str(refused.value)
    assert text.startswith(f"the sqs engine does not support {option!r}: "), text
    assert "\n" not in text
    assert app.engine.queues() == []  # nothing was sent, no queue made
    return text


def test_a_rate_limit_is_refused_at_publish_naming_it(app: App) -> None:
    @app.task(queue="api", rate_limit="100/m", rate_key="partner")
    def sqs_call_partner(order: int) -> None: ...

    text = refused_in_one_line(app, lambda: sqs_call_partner.delay(1), "rate_limit")
    assert "a limit of 100 runs per 60 s for task " in text
    assert "sqs_call_partner (bucket 'partner')" in text
    assert text.endswith("(capability 'flow')")


def test_a_queues_rate_limit_is_refused_naming_the_queue(app: App) -> None:
    @app.task(queue="limited")
    def sqs_limited() -> None: ...

    text = refused_in_one_line(app, sqs_limited.delay, "rate_limit")
    assert "a limit of 10 runs per 1 s for queue 'limited' needs" in text


def test_a_concurrency_key_is_refused_at_publish_naming_it(app: App) -> None:
    @app.task(queue="sync", concurrency_key=lambda user, **_: f"user-{user}", max_concurrency=2)
    def sqs_sync(user: int) -> None: ...

    text = refused_in_one_line(app, lambda: sqs_sync.delay(7), "max_concurrency")
    assert "cap of 2 running per key 'user-7'" in text


@pytest.mark.parametrize("keep", ["latest", "first"])
def test_a_debounce_is_refused_at_publish_naming_it(app: App, keep: Any) -> None:
    @app.task(queue="search", debounce=Debounce(timedelta(seconds=30), key="k", keep=keep))
    def sqs_reindex(doc: str) -> None: ...

    text = refused_in_one_line(app, lambda: sqs_reindex.delay("d"), "debounce")
    assert "one waiting run per key for 30 s" in text
    assert text.endswith("(capability 'unique')")


def test_options_given_at_publish_are_refused_too(app: App) -> None:
    @app.task(queue="plain")
    def sqs_plain() -> None: ...

    refused_in_one_line(app, sqs_plain.options(rate_limit="1/s").delay, "rate_limit")
    refused_in_one_line(app, sqs_plain.options(debounce=5).delay, "debounce")
    sqs_plain.options(fair_key="t").delay()  # what SQS can do goes through
    assert len(app.engine.pop("plain", "w1")) == 1


def test_the_engine_refuses_a_flow_it_cannot_hold_in_one_line(engine: SQSEngine) -> None:
    for flow, command in [
        (Flow("k", 1), "put(flow=Flow(concurrency_key=...))"),
        (Flow(rates=(RateLimit("b", 1, 1.0),), fair_key="t"), "put(flow=Flow(rates=...))"),
    ]:
        with pytest.raises(Unsupported) as refused:
            engine.put("q", "j1", "Task", flow=flow)
        assert refused.value.capability == "flow"
        assert command in str(refused.value)
    assert engine.queues() == []


def test_schedules_are_refused_when_a_pool_registers_them(app: App) -> None:
    @app.periodic(every=60)
    @app.task(queue="reports")
    def sqs_report() -> None: ...

    with pytest.raises(Unsupported) as refused:
        register(app, app.engine, 1_800_000_000.0)
    text = str(refused.value)
    assert text.startswith("the sqs engine cannot ")
    assert "'schedules (@app.periodic)'" in text
    assert "\n" not in text


class SqsNightlyExport(Task):
    """A Kale-style task whose class asks for a rate limit."""

    queue = "exports"
    rate_limit = "5/s"

    def run_task(self, *args: Any, **kwargs: Any) -> None: ...


def test_a_kale_style_tasks_rate_limit_is_refused_too(app: App) -> None:
    text = refused_in_one_line(app, lambda: app.publish(SqsNightlyExport), "rate_limit")
    assert "a limit of 5 runs per 1 s for task " in text
    assert "SqsNightlyExport (bucket " in text

"""Capabilities: what an engine lacks it refuses with `Unsupported`, never a silent no-op."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lanner import Capability, Engine, Flow, LannerError, NewJob, RateLimit, Unsupported

from .helpers import T0, in_state

NOW = T0 + 1

# What the docs promise each engine has (docs/protocol.md, "Engines").
DOCUMENTED_CAPABILITIES: dict[str, frozenset[Capability]] = {
    "sqlite": frozenset(
        {
            Capability.PRIORITY,
            Capability.DELAY,
            Capability.TIMEOUT,
            Capability.PAUSE,
            Capability.MAX_CONCURRENCY,
            Capability.BLOCKING_POP,
            Capability.DEPENDENCIES,
            Capability.CROSS_QUEUE_DEPENDENCIES,
            Capability.TAGS,
            Capability.LOG,
            Capability.TRACKING,
            Capability.WORKERS,
            Capability.QUEUE_FORGET,
            Capability.STATS,
            Capability.RECURRING,
            Capability.RESULTS,
            Capability.WAIT,
            Capability.UNIQUE,
            Capability.LOOKUP,
            Capability.CANCEL,
            Capability.LISTING,
            Capability.FAILURES,
            Capability.CONFIG,
            Capability.LIMITS,
            Capability.FANOUT,
            Capability.EVENTS,
            Capability.FLOW,
            Capability.CROSS_QUEUE_FLOW,
            Capability.FAIRNESS,
        }
    ),
    "redis": frozenset(Capability),
    "redis-cluster": frozenset(Capability)
    - {Capability.CROSS_QUEUE_DEPENDENCIES, Capability.CROSS_QUEUE_FLOW},
    "sqs": frozenset({Capability.DELAY, Capability.BLOCKING_POP, Capability.FAIRNESS}),
}

Command = Callable[[Engine], object]

# A capability that refines another: its commands need that one first.
BASE: dict[Capability, Capability] = {
    Capability.CROSS_QUEUE_DEPENDENCIES: Capability.DEPENDENCIES,
    Capability.CROSS_QUEUE_FLOW: Capability.FLOW,
}

# For each capability, calls of its commands that are valid in the `world` below.
COMMANDS: dict[Capability, dict[str, Command]] = {
    Capability.PRIORITY: {
        "priority": lambda e: e.priority("wait1", 3, now=NOW),
        "put(priority=)": lambda e: e.put("q", "new", "Task", priority=3, now=NOW),
    },
    Capability.DELAY: {
        "put(delay=)": lambda e: e.put("q", "new", "Task", delay=5, now=NOW),
        "retry(delay=)": lambda e: e.retry("run1", "q", "w1", delay=5, now=NOW),
        "complete(delay=)": lambda e: e.complete("run1", "w1", "q", next="q", delay=5, now=NOW),
    },
    Capability.TIMEOUT: {"timeout": lambda e: e.timeout(["run1"], now=NOW)},
    Capability.PAUSE: {
        "pause": lambda e: e.pause(["q"], now=NOW),
        "unpause": lambda e: e.unpause(["q"], now=NOW),
    },
    Capability.MAX_CONCURRENCY: {
        "config_set(<queue>-max-concurrency)": lambda e: e.config_set(
            "q-max-concurrency", 1, now=NOW
        ),
    },
    Capability.BLOCKING_POP: {"pop(wait=)": lambda e: e.pop("empty", "w1", wait=0.2)},
    Capability.DEPENDENCIES: {
        "put(depends=)": lambda e: e.put("q", "new", "Task", depends=["wait1"], now=NOW),
        "complete(depends=)": lambda e: e.complete(
            "run1", "w1", "q", next="q", depends=["wait1"], now=NOW
        ),
        "depends_add": lambda e: e.depends_add("wait1", ["run1"], now=NOW),
        "depends_remove": lambda e: e.depends_remove("wait1", None, now=NOW),
    },
    Capability.CROSS_QUEUE_DEPENDENCIES: {
        "put(depends=<job of another queue>)": lambda e: e.put(
            "q2", "new", "Task", depends=["wait1"], now=NOW
        ),
        "complete(next=, depends=<job of another queue>)": lambda e: e.complete(
            "run1", "w1", "q", next="q2", depends=["wait1"], now=NOW
        ),
    },
    Capability.TAGS: {
        "put(tags=)": lambda e: e.put("q", "new", "Task", tags=["t"], now=NOW),
        "tag_add": lambda e: e.tag_add("wait1", ["t"], now=NOW),
        "tag_remove": lambda e: e.tag_remove("wait1", ["t"], now=NOW),
        "tagged": lambda e: e.tagged("t", now=NOW),
        "tags_top": lambda e: e.tags_top(now=NOW),
    },
    Capability.TRACKING: {
        "track": lambda e: e.track("wait1", now=NOW),
        "untrack": lambda e: e.untrack("wait1", now=NOW),
        "tracked": lambda e: e.tracked(now=NOW),
    },
    Capability.LOG: {"log": lambda e: e.log("wait1", "note", {"k": 1}, now=NOW)},
    Capability.STATS: {"stats": lambda e: e.stats("q", T0, now=NOW)},
    Capability.WORKERS: {
        "workers": lambda e: e.workers(now=NOW),
        "worker_jobs": lambda e: e.worker_jobs("w1", now=NOW),
        "worker_deregister": lambda e: e.worker_deregister(["w1"], now=NOW),
    },
    Capability.RECURRING: {
        "recur": lambda e: e.recur("q", "rec", "Task", "{}", 60.0, now=NOW),
        "unrecur": lambda e: e.unrecur("rec", now=NOW),
        "recur_get": lambda e: e.recur_get("rec", now=NOW),
        "recur_update": lambda e: e.recur_update("rec", {"priority": 1}, now=NOW),
        "recur_tag": lambda e: e.recur_tag("rec", ["t"], now=NOW),
        "recur_untag": lambda e: e.recur_untag("rec", ["t"], now=NOW),
    },
    Capability.QUEUE_FORGET: {"queue_forget": lambda e: e.queue_forget(["q"], now=NOW)},
    Capability.RESULTS: {
        "complete(result=)": lambda e: e.complete("run1", "w1", "q", result="1", now=NOW),
        "complete_many(results=)": lambda e: e.complete_many(
            ["run1"], "w1", "q", results={"run1": "1"}, now=NOW
        ),
    },
    Capability.WAIT: {"wait": lambda e: e.wait("wait1", timeout=0, now=NOW)},
    Capability.UNIQUE: {
        "put(if_exists=keep)": lambda e: e.put("q", "new", "Task", if_exists="keep", now=NOW),
        "put(if_exists=move-unless-running)": lambda e: e.put(
            "q", "new", "Task", if_exists="move-unless-running", now=NOW
        ),
    },
    Capability.LOOKUP: {
        "get": lambda e: e.get("wait1", now=NOW),
        "multiget": lambda e: e.multiget(["wait1", "run1"], now=NOW),
        "outcomes": lambda e: e.outcomes(["wait1", "run1"], now=NOW),
        "requeue": lambda e: e.requeue("q2", "wait1", "Task", now=NOW),
    },
    Capability.CANCEL: {"cancel": lambda e: e.cancel(["wait1"], now=NOW)},
    Capability.LISTING: {
        "jobs": lambda e: e.jobs("waiting", "q", now=NOW),
        "peek": lambda e: e.peek("q", now=NOW),
    },
    Capability.FAILURES: {
        "failed_groups": lambda e: e.failed_groups(now=NOW),
        "failed": lambda e: e.failed("boom", now=NOW),
        "unfail": lambda e: e.unfail("q", "boom", now=NOW),
    },
    Capability.CONFIG: {
        "config_set(<key>)": lambda e: e.config_set("my-key", 1, now=NOW),
        "config_set(heartbeat)": lambda e: e.config_set("heartbeat", 30, now=NOW),
    },
    Capability.LIMITS: {
        "put(expires_at=)": lambda e: e.put("q", "new", "Task", expires_at=NOW + 5, now=NOW),
        "queue_usage": lambda e: e.queue_usage("q", now=NOW),
        "config_set(<queue>-max-items)": lambda e: e.config_set("q-max-items", 5, now=NOW),
    },
    Capability.FANOUT: {
        "put(fanout child)": lambda e: e.put("q+c", "new", "Task", now=NOW),
        "pop(fanout child)": lambda e: e.pop("q+c", "w1", now=NOW),
    },
    Capability.EVENTS: {
        "events": lambda e: e.events().close(),
        "events(worker=)": lambda e: e.events(worker="w1").close(),
    },
    Capability.FLOW: {
        "put(flow=concurrency)": lambda e: e.put("q", "new", "Task", flow=Flow("k", 1), now=NOW),
        "put(flow=rates)": lambda e: e.put(
            "q", "new", "Task", flow=Flow(rates=(RateLimit("b", 5, 1.0),)), now=NOW
        ),
        "flow_state": lambda e: e.flow_state(now=NOW),
    },
    Capability.FAIRNESS: {
        "put(flow=fair_key)": lambda e: e.put("q", "new", "Task", flow=Flow(fair_key="t"), now=NOW),
    },
    Capability.CROSS_QUEUE_FLOW: {
        "put_many(flow=<key of two queues>)": lambda e: e.put_many(
            [
                NewJob("q", "new", "Task", flow=Flow("k", 1)),
                NewJob("q2", "new2", "Task", flow=Flow("k", 1)),
            ],
            now=NOW,
        ),
    },
}


def world(engine: Engine) -> None:
    in_state(engine, "running", "run1", "q")
    in_state(engine, "waiting", "wait1", "q")


def state(engine: Engine) -> object:
    shown: list[object] = [engine.queue_counts("q", now=NOW), engine.config_all(now=NOW)]
    if Capability.LOOKUP in engine.capabilities:
        shown.append(engine.multiget(["run1", "wait1", "new"], now=NOW))
    return shown


def test_every_capability_has_commands_listed_here() -> None:
    assert set(COMMANDS) == set(Capability)


def test_capabilities_is_a_frozenset_of_capability(engine: Engine) -> None:
    assert isinstance(engine.capabilities, frozenset)
    assert all(isinstance(c, Capability) for c in engine.capabilities)


def test_engine_name_is_the_one_opened(engine: Engine, engine_name: str) -> None:
    assert engine.name == engine_name


def test_capabilities_are_the_documented_ones(engine: Engine, engine_name: str) -> None:
    if engine_name not in DOCUMENTED_CAPABILITIES:
        pytest.skip(f"docs/protocol.md lists no capabilities for {engine_name}")
    assert engine.capabilities == DOCUMENTED_CAPABILITIES[engine_name]


def test_max_data_bytes_is_a_positive_int(engine: Engine) -> None:
    assert isinstance(engine.max_data_bytes, int)
    assert engine.max_data_bytes > 0


def test_every_missing_capability_raises_unsupported_and_changes_nothing(engine: Engine) -> None:
    world(engine)
    missing = [c for c in Capability if c not in engine.capabilities]
    problems: list[str] = []
    for capability in missing:
        for command, call in COMMANDS[capability].items():
            before = state(engine)
            # An engine without the capability a command needs first refuses that one.
            base = BASE.get(capability)
            named = base if base is not None and base not in engine.capabilities else capability
            try:
                call(engine)
            except Unsupported as error:
                if error.capability != named.value:
                    problems.append(f"{command}: names capability {error.capability!r}")
                if named.value not in str(error):
                    problems.append(f"{command}: message does not name {named.value!r}")
            except Exception as error:
                problems.append(f"{command}: raised {type(error).__name__}: {error}")
            else:
                problems.append(f"{command}: did not raise Unsupported")
            if state(engine) != before:
                problems.append(f"{command}: changed the store")
    assert problems == []


@pytest.mark.parametrize(
    ("capability", "command"),
    [
        pytest.param(capability, command, id=command)
        for capability, commands in COMMANDS.items()
        for command in commands
    ],
)
def test_present_capabilities_do_not_raise_unsupported(
    engine: Engine, capability: Capability, command: str
) -> None:
    if capability not in engine.capabilities:
        pytest.skip(f"{engine.name} engine lacks {capability.value}")
    world(engine)
    try:
        COMMANDS[capability][command](engine)
    except Unsupported:
        pytest.fail(f"{command} raised Unsupported though {capability.value} is present")
    except LannerError:
        pass  # a command refusing this particular world is other tests' business


def test_core_commands_never_raise_unsupported(engine: Engine) -> None:
    world(engine)
    engine.put_many([NewJob("q2", "new", "Task")], now=NOW)
    engine.heartbeat("run1", "w1", now=NOW)
    assert list(engine.heartbeat_many(["run1"], "w1", now=NOW)) == ["run1"]
    assert engine.complete_many(["run1"], "w1", "q", now=NOW) == ["run1"]
    [job] = engine.pop("q2", "w1", now=NOW)
    engine.release([job.jid], "w1", "q2", now=NOW)
    [job] = engine.pop("q2", "w1", now=NOW)
    engine.retry(job.jid, "q2", "w1", now=NOW)
    [job] = engine.pop("q2", "w1", now=NOW)
    engine.fail(job.jid, "w1", "boom", "m", now=NOW)
    engine.queues(now=NOW)
    assert engine.length("q", now=NOW) == 1  # wait1
    engine.config_set("q-heartbeat", 30, now=NOW)
    assert engine.config_get("q-heartbeat", now=NOW) == 30
    engine.config_unset("q-heartbeat", now=NOW)
    assert engine.config_all(now=NOW)["heartbeat"] == 60

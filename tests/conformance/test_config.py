"""Configuration: defaults, set/unset/all, and the per-queue keys pop and heartbeat use."""

from __future__ import annotations

from typing import Any

import pytest

from lanner import CONFIG_DEFAULTS, Capability, ConfigValue, Engine, MalformedArgument

from .helpers import T0, get, running

DOCUMENTED_DEFAULTS = {
    "heartbeat": 60,
    "grace-period": 10,
    "max-job-history": 100,
    "jobs-history": 604800,
    "jobs-history-count": 50000,
    "max-worker-age": 86400,
    "stats-history": 30,
    "histogram-history": 7,
    "application": "lanner",
}


def test_config_defaults_are_the_documented_ones(engine: Engine) -> None:
    assert dict(CONFIG_DEFAULTS) == DOCUMENTED_DEFAULTS
    for key, value in DOCUMENTED_DEFAULTS.items():
        assert engine.config_get(key, now=T0) == value, key


def test_config_all_of_a_fresh_store_holds_the_defaults(engine: Engine) -> None:
    everything = engine.config_all(now=T0)
    assert {key: everything.get(key) for key in DOCUMENTED_DEFAULTS} == DOCUMENTED_DEFAULTS


def test_config_get_of_an_unset_key_without_default_is_none(engine: Engine) -> None:
    assert engine.config_get("q-heartbeat", now=T0) is None
    assert engine.config_get("no-such-key", now=T0) is None


@pytest.mark.requires(Capability.CONFIG)
@pytest.mark.parametrize("value", [30, 2.5, "text"])
def test_config_set_then_get_returns_the_value_and_type(engine: Engine, value: ConfigValue) -> None:
    engine.config_set("my-key", value, now=T0)
    got = engine.config_get("my-key", now=T0)
    assert got == value
    assert type(got) is type(value)


@pytest.mark.requires(Capability.CONFIG)
def test_config_set_overrides_a_default(engine: Engine) -> None:
    engine.config_set("heartbeat", 30, now=T0)
    assert engine.config_get("heartbeat", now=T0) == 30
    assert engine.config_all(now=T0)["heartbeat"] == 30


@pytest.mark.requires(Capability.CONFIG)
def test_config_unset_restores_the_default(engine: Engine) -> None:
    engine.config_set("heartbeat", 30, now=T0)
    engine.config_unset("heartbeat", now=T0)
    assert engine.config_get("heartbeat", now=T0) == 60


@pytest.mark.requires(Capability.CONFIG)
def test_config_unset_of_a_key_without_default_removes_it(engine: Engine) -> None:
    engine.config_set("my-key", "v", now=T0)
    engine.config_unset("my-key", now=T0)
    assert engine.config_get("my-key", now=T0) is None
    assert "my-key" not in engine.config_all(now=T0)


def test_config_unset_of_an_unknown_key_does_nothing(engine: Engine) -> None:
    engine.config_unset("never-set", now=T0)
    assert engine.config_get("heartbeat", now=T0) == 60


@pytest.mark.requires(Capability.CONFIG)
def test_config_all_merges_what_was_set(engine: Engine) -> None:
    engine.config_set("q-heartbeat", 5, now=T0)
    engine.config_set("grace-period", 3, now=T0)
    everything = engine.config_all(now=T0)
    assert everything["q-heartbeat"] == 5
    assert everything["grace-period"] == 3
    assert everything["heartbeat"] == 60


@pytest.mark.requires(Capability.CONFIG)
def test_global_heartbeat_sets_the_lock_length(engine: Engine) -> None:
    engine.config_set("heartbeat", 30, now=T0)
    job = running(engine, "j1")
    assert job.expires == T0 + 30
    assert engine.heartbeat("j1", "w1", now=T0 + 1) == T0 + 31


def test_queue_heartbeat_overrides_the_global_one(engine: Engine) -> None:
    engine.config_set("fast-heartbeat", 5, now=T0)
    assert running(engine, "j1", queue="fast").expires == T0 + 5
    assert running(engine, "j2", queue="slow").expires == T0 + 60
    assert engine.heartbeat("j1", "w1", now=T0 + 1) == T0 + 6


@pytest.mark.requires(Capability.CONFIG)
def test_fractional_heartbeat_is_honoured(engine: Engine) -> None:
    engine.config_set("heartbeat", 7.5, now=T0)
    assert running(engine, "j1").expires == T0 + 7.5


@pytest.mark.requires(Capability.LOOKUP, Capability.CONFIG)
def test_grace_period_setting_sets_the_grace_length(engine: Engine) -> None:
    engine.config_set("grace-period", 3, now=T0)
    running(engine, "j1")
    engine.pop("q", "w2", now=T0 + 60)
    assert get(engine, "j1", T0 + 60).expires == T0 + 63
    assert [j.jid for j in engine.pop("q", "w2", now=T0 + 63)] == ["j1"]


@pytest.mark.requires(Capability.LOOKUP, Capability.CONFIG)
def test_max_job_history_setting_caps_histories(engine: Engine) -> None:
    engine.config_set("max-job-history", 2, now=T0)
    for i in range(5):
        engine.put("q", "j1", "Task", now=T0 + i)
    assert len(get(engine, "j1", T0 + 5).history) == 2


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, b"bytes"])
def test_config_set_of_a_value_of_another_type_is_malformed(engine: Engine, value: object) -> None:
    loose: Any = engine
    with pytest.raises(MalformedArgument):
        loose.config_set("my-key", value, now=T0)
    assert engine.config_get("my-key", now=T0) is None


@pytest.mark.parametrize("key", ["", "a\nb", "x" * 257])
def test_config_set_of_a_bad_key_is_malformed(engine: Engine, key: str) -> None:
    with pytest.raises(MalformedArgument):
        engine.config_set(key, 1, now=T0)

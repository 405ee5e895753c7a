"""heartbeat_many: one call extends every lock a worker holds among many jobs.

A job whose lock the worker no longer holds (cancelled, completed, failed, timed out,
handed to another worker, unknown) is left out of the reply: lost to it, never an error
for the others. A job popped at T0 holds its lock until T0 + 60 (the default heartbeat).
"""

from __future__ import annotations

from typing import Any

import pytest

from lanner import Capability, Engine, InvalidName, MalformedArgument
from lanner.checks import MAX_HEARTBEAT_JIDS

from .helpers import GRACE, HEARTBEAT, T0, get, pop_jids, put_all, running

EXPIRED = T0 + HEARTBEAT  # the first moment the lock of a job popped at T0 has run out


def held(engine: Engine, jids: list[str], queue: str = "q", worker: str = "w1") -> None:
    """Put `jids` into `queue` and pop them all for `worker` (the queue holds no others)."""
    put_all(engine, queue, jids)
    assert sorted(pop_jids(engine, queue, worker, len(jids))) == sorted(jids)


# -- extending ----------------------------------------------------------------------------


def test_every_held_lock_is_extended_and_its_new_expiry_returned(engine: Engine) -> None:
    held(engine, ["a", "b", "c"])

    extended = engine.heartbeat_many(["c", "a", "b"], "w1", now=T0 + 30)

    assert extended == dict.fromkeys(["c", "a", "b"], T0 + 30 + HEARTBEAT)
    assert list(extended) == ["c", "a", "b"]  # in the order asked


@pytest.mark.requires(Capability.LOOKUP)
def test_the_stored_locks_are_the_expiries_returned(engine: Engine) -> None:
    held(engine, ["a", "b"])

    extended = engine.heartbeat_many(["a", "b"], "w1", now=T0 + 30.25)

    assert {jid: get(engine, jid, T0 + 31).expires for jid in extended} == extended


@pytest.mark.driven_clock
def test_extended_jobs_are_not_taken_when_their_first_lock_runs_out(engine: Engine) -> None:
    held(engine, ["a", "b"])
    engine.heartbeat_many(["a", "b"], "w1", now=T0 + 50)

    assert pop_jids(engine, "q", "w2", 2, now=EXPIRED) == []
    assert pop_jids(engine, "q", "w2", 2, now=EXPIRED + GRACE) == []
    extended_expiry = T0 + 50 + HEARTBEAT
    assert pop_jids(engine, "q", "w2", 2, now=extended_expiry) == []  # its grace period
    assert sorted(pop_jids(engine, "q", "w2", 2, now=extended_expiry + GRACE)) == ["a", "b"]


def test_each_queue_keeps_its_own_lock_duration(engine: Engine) -> None:
    engine.config_set("short-heartbeat", 30, now=T0)
    held(engine, ["a"])
    held(engine, ["s"], queue="short")

    extended = engine.heartbeat_many(["a", "s"], "w1", now=T0 + 10)

    assert extended == {"a": T0 + 10 + HEARTBEAT, "s": T0 + 10 + 30}


@pytest.mark.requires(Capability.LOOKUP)
def test_the_jobs_data_is_kept(engine: Engine) -> None:
    engine.put("q", "a", "Task", '{"keep": true}', now=T0)
    pop_jids(engine, "q")
    engine.heartbeat_many(["a"], "w1", now=T0 + 1)
    assert get(engine, "a", T0 + 1).decoded_data() == {"keep": True}


def test_a_jid_given_twice_is_extended_once(engine: Engine) -> None:
    held(engine, ["a"])
    assert engine.heartbeat_many(["a", "a"], "w1", now=T0 + 1) == {"a": T0 + 1 + HEARTBEAT}


def test_an_expired_lock_nobody_took_is_extended(engine: Engine) -> None:
    held(engine, ["a"])
    assert engine.heartbeat_many(["a"], "w1", now=EXPIRED + 5) == {"a": EXPIRED + 5 + HEARTBEAT}


@pytest.mark.driven_clock
def test_a_lock_in_its_grace_period_is_extended_and_kept(engine: Engine) -> None:
    held(engine, ["a"])
    pop_jids(engine, "q", "w2", now=EXPIRED)  # grants the grace period

    assert engine.heartbeat_many(["a"], "w1", now=EXPIRED + 5) == {"a": EXPIRED + 5 + HEARTBEAT}
    assert pop_jids(engine, "q", "w2", now=EXPIRED + GRACE) == []


def test_nothing_to_extend_returns_nothing(engine: Engine) -> None:
    assert engine.heartbeat_many([], "w1", now=T0) == {}
    assert engine.heartbeat_many((), "w1", now=T0) == {}


# -- locks lost: left out, the others extended --------------------------------------------


def test_jobs_of_another_worker_and_unknown_jids_are_left_out(engine: Engine) -> None:
    held(engine, ["mine"])
    held(engine, ["theirs"], worker="w2")
    engine.put("q", "idle", "Task", now=T0)

    extended = engine.heartbeat_many(["theirs", "mine", "idle", "nope"], "w1", now=T0 + 1)

    assert extended == {"mine": T0 + 1 + HEARTBEAT}
    assert engine.heartbeat_many(["theirs"], "w2", now=T0 + 2) == {"theirs": T0 + 2 + HEARTBEAT}


@pytest.mark.requires(Capability.LOOKUP)
def test_another_workers_lock_is_left_as_it_was(engine: Engine) -> None:
    held(engine, ["theirs"], worker="w2")
    engine.heartbeat_many(["theirs"], "w1", now=T0 + 1)
    assert get(engine, "theirs", T0 + 1).expires == T0 + HEARTBEAT


def test_finished_jobs_are_left_out(engine: Engine) -> None:
    held(engine, ["done", "failed", "released", "kept"])
    engine.complete("done", "w1", "q", now=T0 + 1)
    engine.fail("failed", "w1", "boom", "it broke", now=T0 + 1)
    engine.release(["released"], "w1", "q", now=T0 + 1)

    extended = engine.heartbeat_many(["done", "failed", "released", "kept"], "w1", now=T0 + 2)

    assert extended == {"kept": T0 + 2 + HEARTBEAT}


@pytest.mark.requires(Capability.CANCEL)
def test_cancelled_jobs_are_left_out(engine: Engine) -> None:
    held(engine, ["gone", "kept"])
    engine.cancel(["gone"], now=T0 + 1)
    assert engine.heartbeat_many(["gone", "kept"], "w1", now=T0 + 2) == {"kept": T0 + 2 + HEARTBEAT}


@pytest.mark.requires(Capability.TIMEOUT)
def test_timed_out_jobs_are_left_out(engine: Engine) -> None:
    held(engine, ["stalled", "kept"])
    engine.timeout(["stalled"], now=T0 + 1)
    assert engine.heartbeat_many(["stalled", "kept"], "w1", now=T0 + 2) == {
        "kept": T0 + 2 + HEARTBEAT
    }


@pytest.mark.driven_clock
@pytest.mark.requires(Capability.LOOKUP)
def test_a_job_handed_to_another_worker_is_left_out(engine: Engine) -> None:
    held(engine, ["late"])
    pop_jids(engine, "q", "w2", now=EXPIRED)
    assert pop_jids(engine, "q", "w2", now=EXPIRED + GRACE) == ["late"]
    running(engine, "kept", now=EXPIRED + GRACE)

    extended = engine.heartbeat_many(["late", "kept"], "w1", now=EXPIRED + GRACE + 1)

    assert extended == {"kept": EXPIRED + GRACE + 1 + HEARTBEAT}
    late = get(engine, "late", EXPIRED + GRACE + 1)
    assert (late.worker, late.expires) == ("w2", EXPIRED + GRACE + HEARTBEAT)


# -- bad arguments: refused before anything changes ---------------------------------------


@pytest.mark.parametrize(
    "jids", ["a", b"a", None, 5, {"a": 1}, ["a", 5], ["a", None], ["a", b"b"]], ids=repr
)
def test_jids_that_are_not_a_list_of_str_are_malformed(engine: Engine, jids: Any) -> None:
    held(engine, ["a"])
    with pytest.raises(MalformedArgument, match="jids"):
        engine.heartbeat_many(jids, "w1", now=T0 + 1)


@pytest.mark.parametrize("jid", ["", "a\nb", "nul\x00", "x" * 257], ids=repr)
def test_a_bad_jid_is_an_invalid_name(engine: Engine, jid: str) -> None:
    with pytest.raises(InvalidName, match="jids"):
        engine.heartbeat_many(["a", jid], "w1", now=T0 + 1)


@pytest.mark.parametrize("worker", ["", "a\nb", None, 5], ids=repr)
def test_a_bad_worker_is_malformed(engine: Engine, worker: Any) -> None:
    with pytest.raises(MalformedArgument, match="worker"):
        engine.heartbeat_many(["a"], worker, now=T0 + 1)


def test_more_jids_than_a_call_takes_are_malformed(engine: Engine) -> None:
    jids = [f"j{index}" for index in range(MAX_HEARTBEAT_JIDS + 1)]
    with pytest.raises(MalformedArgument, match=f"at most {MAX_HEARTBEAT_JIDS}"):
        engine.heartbeat_many(jids, "w1", now=T0 + 1)


@pytest.mark.requires(Capability.LOOKUP)
def test_a_refused_call_extends_nothing(engine: Engine) -> None:
    held(engine, ["a"])
    with pytest.raises(MalformedArgument):
        engine.heartbeat_many(["a", "b\n"], "w1", now=T0 + 30)
    with pytest.raises(MalformedArgument):
        engine.heartbeat_many(["a"] * (MAX_HEARTBEAT_JIDS + 1), "w1", now=T0 + 30)
    assert get(engine, "a", T0 + 30).expires == T0 + HEARTBEAT


def test_as_many_jids_as_a_call_takes_are_accepted(engine: Engine) -> None:
    held(engine, ["a"])
    jids = ["a", *(f"j{index}" for index in range(MAX_HEARTBEAT_JIDS - 1))]
    assert engine.heartbeat_many(jids, "w1", now=T0 + 1) == {"a": T0 + 1 + HEARTBEAT}

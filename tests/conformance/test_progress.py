"""Progress entries: `log(jid, "progress", {fraction, message})`, a task's progress
(`Job.progress`): checked, only the latest of a run kept, announced as a `progress` event."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, Event, MalformedArgument

from .helpers import T0, get, running, whats
from .test_events import take, then_quiet

pytestmark = pytest.mark.requires(Capability.LOG, Capability.LOOKUP)


def test_a_run_of_progress_entries_keeps_only_the_latest(engine: Engine) -> None:
    running(engine, "j1")
    for step in range(1, 6):
        engine.log("j1", "progress", {"fraction": step / 5, "message": f"step {step}"},
                   now=T0 + step)  # fmt: skip

    job = get(engine, "j1", T0 + 10)
    assert whats(job) == ["put", "popped", "progress"]
    last = job.history[-1]
    assert (last.when, last.details["fraction"], last.details["message"]) == (T0 + 5, 1, "step 5")


def test_progress_after_another_entry_is_appended(engine: Engine) -> None:
    running(engine, "j1")
    engine.log("j1", "progress", {"fraction": 0.25, "message": "a"}, now=T0 + 1)
    engine.log("j1", "checkpoint", {"step": 1}, now=T0 + 2)
    engine.log("j1", "progress", {"fraction": 0.5, "message": "b"}, now=T0 + 3)

    job = get(engine, "j1", T0 + 3)
    assert whats(job) == ["put", "popped", "progress", "checkpoint", "progress"]
    assert [e.details.get("fraction") for e in job.history if e.what == "progress"] == [0.25, 0.5]


def test_progress_is_rounded_to_four_places_and_its_message_defaults_to_nothing(
    engine: Engine,
) -> None:
    running(engine, "j1")
    engine.log("j1", "progress", {"fraction": 1 / 3}, now=T0 + 1)
    details = get(engine, "j1", T0 + 1).history[-1].details
    assert (details["fraction"], details["message"]) == (0.3333, "")


@pytest.mark.parametrize(
    "data",
    [
        {"fraction": 1.5},
        {"fraction": -0.1},
        {"fraction": float("nan")},
        {"fraction": "half"},
        {"fraction": True},
        {},
        {"fraction": 0.5, "message": 3},
        {"fraction": 0.5, "message": "x" * 1001},
        {"fraction": 0.5, "eta": 10},
    ],
)
def test_a_malformed_progress_entry_is_refused(engine: Engine, data: dict[str, object]) -> None:
    running(engine, "j1")
    with pytest.raises(MalformedArgument, match="progress"):
        engine.log("j1", "progress", data, now=T0 + 1)
    assert whats(get(engine, "j1", T0 + 1)) == ["put", "popped"]


@pytest.mark.requires(Capability.EVENTS)
def test_each_progress_entry_is_announced(engine: Engine) -> None:
    running(engine, "j1")
    with engine.events() as stream:
        engine.log("j1", "progress", {"fraction": 0.4, "message": "step 2 of 5"}, now=T0 + 1)
        engine.log("j1", "progress", {"fraction": 1, "message": "done"}, now=T0 + 2)
        engine.log("j1", "checkpoint", now=T0 + 3)  # other entries are not announced
        assert take(stream, 2) == [
            Event("progress", jid="j1", queue="q",
                  details={"fraction": "0.4", "message": "step 2 of 5"}),
            Event("progress", jid="j1", queue="q", details={"fraction": "1", "message": "done"}),
        ]  # fmt: skip
        then_quiet(stream)

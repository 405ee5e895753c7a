"""Admission: a job without arguments skips `bind` only when its task takes none."""

from __future__ import annotations

import pytest

from lanner.worker.admission import Rejected, admit

from .world import QUEUE, WLBoom, WLEcho, World

EMPTY = '{"v": 1, "args": [], "kwargs": {}}'


def test_no_arguments_for_a_task_that_takes_none_are_admitted(world: World) -> None:
    world.engine.put(QUEUE, "none", WLBoom.name, EMPTY)
    for _ in range(2):  # the second time from what the first learned
        task_class, _, args, kwargs = admit(world.get("none"), 10_000, world.app)
        assert (task_class, args, kwargs) == (WLBoom, (), {})


def test_no_arguments_for_a_task_that_needs_one_are_refused(world: World) -> None:
    world.engine.put(QUEUE, "missing", WLEcho.name, EMPTY)
    for _ in range(2):
        with pytest.raises(Rejected, match="missing a required argument") as refused:
            admit(world.get("missing"), 10_000, world.app)
        assert refused.value.group == "lanner-bad-arguments"


def test_a_payload_is_measured_in_utf8_bytes(world: World) -> None:
    data = '{"v": 1, "args": ["' + "é" * 30 + '"], "kwargs": {}}'  # 64 bytes of é
    world.engine.put(QUEUE, "wide", WLEcho.name, data)
    job = world.get("wide")
    admit(job, len(data.encode()), world.app)
    with pytest.raises(Rejected, match="the limit is") as refused:
        admit(job, len(data.encode()) - 1, world.app)
    assert refused.value.group == "lanner-oversized"

"""Tags: put(tags=...), tag_add, tag_remove, tagged and tags_top."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobNotFound

from .helpers import T0, get, in_state, jids


@pytest.fixture(autouse=True)
def _needs_tags(engine: Engine) -> None:
    require_tags(engine)


def require_tags(engine: Engine) -> None:
    if Capability.TAGS not in engine.capabilities:
        pytest.skip(f"{engine.name} engine lacks tags")


def test_tag_add_adds_tags_and_returns_them(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["a"], now=T0)
    assert engine.tag_add("j1", ["b", "c"], now=T0 + 1) == ["a", "b", "c"]
    assert get(engine, "j1", T0 + 1).tags == ("a", "b", "c")


def test_tag_add_does_not_duplicate_tags(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["a"], now=T0)
    assert engine.tag_add("j1", ["a", "b", "b"], now=T0 + 1) == ["a", "b"]


def test_put_drops_duplicate_tags(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["a", "b", "a"], now=T0)
    assert get(engine, "j1").tags == ("a", "b")


def test_tag_remove_removes_tags_and_returns_the_rest(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["a", "b", "c"], now=T0)
    assert engine.tag_remove("j1", ["b", "absent"], now=T0 + 1) == ["a", "c"]
    assert get(engine, "j1", T0 + 1).tags == ("a", "c")


def test_tag_add_on_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.tag_add("nope", ["a"], now=T0)


def test_tag_remove_on_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.tag_remove("nope", ["a"], now=T0)


def test_tagged_gives_the_jobs_with_a_tag_oldest_tagging_first(engine: Engine) -> None:
    engine.put("q", "b", "Task", tags=["t"], now=T0)
    engine.put("q", "untagged", "Task", now=T0 + 1)
    engine.put("q", "a", "Task", now=T0 + 2)
    engine.tag_add("a", ["t"], now=T0 + 3)

    page = engine.tagged("t", now=T0 + 4)

    assert page.total == 2
    assert jids(page.jobs) == ["b", "a"]


def test_tagged_pages_with_offset_and_count(engine: Engine) -> None:
    for i in range(5):
        engine.put("q", f"j{i}", "Task", tags=["t"], now=T0 + i)
    page = engine.tagged("t", 1, 2, now=T0 + 10)
    assert (page.total, jids(page.jobs)) == (5, ["j1", "j2"])


def test_tagged_of_an_unused_tag_is_empty(engine: Engine) -> None:
    page = engine.tagged("nothing", now=T0)
    assert (page.total, page.jobs) == (0, ())


def test_removed_tag_no_longer_finds_the_job(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["t"], now=T0)
    engine.tag_remove("j1", ["t"], now=T0 + 1)
    assert engine.tagged("t", now=T0 + 1).total == 0


def test_reput_with_new_tags_moves_the_job_between_tags(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["old"], now=T0)
    engine.put("q", "j1", "Task", tags=["new"], now=T0 + 1)
    assert engine.tagged("old", now=T0 + 1).total == 0
    assert jids(engine.tagged("new", now=T0 + 1).jobs) == ["j1"]


def test_cancelled_job_leaves_its_tags(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["t"], now=T0)
    engine.cancel(["j1"], now=T0 + 1)
    assert engine.tagged("t", now=T0 + 1).total == 0


def test_tags_survive_completion(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["t"], now=T0)
    engine.pop("q", "w1", now=T0)
    engine.complete("j1", "w1", "q", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).tags == ("t",)


def test_tags_top_lists_tags_on_two_or_more_jobs_most_used_first(engine: Engine) -> None:
    engine.put("q", "j1", "Task", tags=["common", "pair", "solo"], now=T0)
    engine.put("q", "j2", "Task", tags=["common", "pair"], now=T0)
    engine.put("q", "j3", "Task", tags=["common"], now=T0)

    assert engine.tags_top(now=T0) == ["common", "pair"]


def test_tags_top_pages_with_offset_and_count(engine: Engine) -> None:
    for i in range(3):
        engine.put("q", f"j{i}", "Task", tags=["three", "two"] if i < 2 else ["three"], now=T0)
    assert engine.tags_top(1, 1, now=T0) == ["two"]
    assert engine.tags_top(0, 1, now=T0) == ["three"]


def test_tags_top_of_a_store_without_tags_is_empty(engine: Engine) -> None:
    in_state(engine, "waiting", "j1")
    assert engine.tags_top(now=T0) == []

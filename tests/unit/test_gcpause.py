"""paused_gc: no collection inside, nothing left in the young generation for the next one."""

from __future__ import annotations

import gc
import weakref

import pytest

from logquake.gcpause import paused_gc
from logquake.history import Op, load_history, write_history


@pytest.fixture(autouse=True)
def _gc_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_survivors_leave_the_young_generation() -> None:
    gc.collect()
    with paused_gc():
        assert not gc.isenabled()
        kept = [[i] for i in range(50_000)]
    assert gc.isenabled()
    # Merely re-enabling would leave all 50,000 lists to the next gen-0 collection.
    assert gc.get_count()[0] < 1_000
    assert _in_oldest_generation(kept[-1])
    assert gc.get_freeze_count() == 0
    assert len(kept) == 50_000


class _Node:
    pass


def test_cycles_made_inside_are_still_collected() -> None:
    with paused_gc():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        dead = weakref.ref(a)
        del a, b
    assert dead() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert dead() is None


def test_nested_pauses_enable_once_at_the_outside() -> None:
    with paused_gc():
        with paused_gc():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_program_that_froze_objects_keeps_them_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with paused_gc():
            [[i] for i in range(100)]
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


def test_load_history_leaves_the_young_generation_empty(tmp_path) -> None:
    path = tmp_path / "history.jsonl"
    ops = []
    for i in range(2_000):
        ops.append(Op(index=2 * i, time=2 * i, process=i % 7, type="invoke", f="poll", value=[["poll"]]))
        ops.append(Op(index=2 * i + 1, time=2 * i + 1, process=i % 7, type="ok", f="poll",
                      value=[["poll", {"3": [[i, i], [i + 1, i + 1]]}]]))
    write_history(path, ops)
    gc.collect()
    loaded = load_history(path)
    assert len(loaded) == 4_000
    # Not left for the young generations' collections to walk (each would scan them all).
    assert _in_oldest_generation(loaded[-1]) and _in_oldest_generation(loaded[-1].value)


def _in_oldest_generation(obj) -> bool:
    return any(o is obj for o in gc.get_objects(generation=2))

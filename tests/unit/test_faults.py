"""Faults: nemesis ops paired into intervals, and which were in effect when."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logquake.faults import Faults
from logquake.history import Op


def nem(f: str, t: int, value: object = None) -> Op:
    return Op(process="nemesis", type="info", f=f, time=t, value=value if value is not None else f)


def spans(faults: Faults) -> list[tuple[str, int, int | None]]:
    return [(f.kind, f.start.time, f.end.time if f.end else None) for f in faults.intervals()]


def test_a_start_and_its_stop_make_one_fault():
    faults = Faults([nem("start-partition", 1, "majority"), nem("stop-partition", 5)])
    [f] = faults.intervals()
    assert (f.kind, f.start.value, f.end.f if f.end else None) == ("partition", "majority", "stop-partition")
    assert spans(faults) == [("partition", 1, 5)]
    assert faults.in_effect() == {}


def test_faults_of_different_kinds_overlap_and_nest():
    faults = Faults([nem("start-kill", 1), nem("start-partition", 2), nem("stop-partition", 3),
                     nem("stop-kill", 4)])
    assert spans(faults) == [("kill", 1, 4), ("partition", 2, 3)]


def test_a_repeated_start_joins_the_fault_in_effect_and_is_its_latest_word():
    a, b = nem("start-partition", 1, "one"), nem("start-partition", 3, "majority")
    faults = Faults([a, b])
    assert faults.in_effect() == {"partition": b}
    faults.add(nem("stop-partition", 5))
    faults.add(nem("start-partition", 7, "bridge"))
    [first, second] = faults.intervals()
    assert first.starts == (a, b) and first.end is not None and first.end.time == 5
    assert (second.start.value, second.end) == ("bridge", None)


def test_heal_ends_every_fault_in_effect():
    faults = Faults([nem("start-kill", 1), nem("start-clock", 2), nem("heal", 6, "healed")])
    assert spans(faults) == [("kill", 1, 6), ("clock", 2, 6)]
    assert all(f.end is not None and f.end.value == "healed" for f in faults.intervals())
    assert faults.in_effect() == {}


def test_a_fault_never_stopped_has_no_end():
    faults = Faults([nem("start-disk:power-loss", 4)])
    assert spans(faults) == [("disk:power-loss", 4, None)]
    assert list(faults.in_effect()) == ["disk:power-loss"]


def test_a_stop_without_a_start_ends_nothing_and_other_ops_are_no_boundary():
    faults = Faults([nem("stop-kill", 1), nem("start-kill", 2), nem("bump-clock", 3), nem("heal", 4),
                     nem("stop-kill", 5)])
    assert spans(faults) == [("kill", 2, 4)]
    assert [op.f for op in faults.between(0, 9)] == ["stop-kill", "start-kill", "bump-clock", "heal", "stop-kill"]


def test_in_effect_before_a_time_excludes_what_starts_then_and_keeps_what_ends_then():
    start_kill, stop_kill, start_pause = nem("start-kill", 2), nem("stop-kill", 5), nem("start-pause", 5)
    faults = Faults([start_kill, stop_kill, start_pause])
    assert faults.in_effect_before(2) == []
    assert faults.in_effect_before(3) == [start_kill]
    assert faults.in_effect_before(5) == [start_kill]  # ended at 5: still in effect before it
    assert faults.in_effect_before(6) == [start_pause]
    assert faults.between(2, 5) == [start_kill, stop_kill, start_pause]
    assert faults.between(3, 4) == []


def _op_by_op(faults: list[Op], since: int, until: int) -> list[Op]:
    """The final-read checker's former pairing, op by op: the oracle of the bisected one."""
    in_effect: dict[str, Op] = {}
    out: list[Op] = []
    for f in faults:
        if f.time > until:
            break
        if f.time >= since:
            out.append(f)
        elif f.f.startswith("start-"):
            in_effect[f.f[6:]] = f
        elif f.f.startswith("stop-"):
            in_effect.pop(f.f[5:], None)
        elif f.f == "heal":
            in_effect.clear()
    return [*in_effect.values(), *out]


nemesis_fs = st.sampled_from(["start-kill", "stop-kill", "start-partition", "stop-partition", "heal", "bump"])


@given(st.lists(st.tuples(nemesis_fs, st.integers(0, 3)), max_size=30), st.integers(-1, 60), st.integers(-1, 60))
def test_bisected_answers_agree_with_pairing_op_by_op(steps, since, until):
    ops, t = [], 0
    for f, gap in steps:
        t += gap
        ops.append(nem(f, t, len(ops)))
    faults = Faults(ops)
    got = [*faults.in_effect_before(min(since, until + 1)), *faults.between(since, until)]
    assert got == _op_by_op(ops, since, until)

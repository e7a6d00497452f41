"""The numpy index (queue_flat.py) and the general one (queue_index.py) give the same results.

build_index takes the numpy path when every read and send is a pair of 64-bit integers
and the general path otherwise; both must produce identical results.json objects.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from logquake.checker import CheckOptions, check_history, cycles, queue_flat, queue_lost, queue_process
from logquake.checker.generate import BUGS, SimConfig, simulate
from logquake.checker.queue_index import QueueIndex, _gather, build_index
from logquake.history import Op


def _history(bug: str, txn: bool, seed: int) -> list[Op]:
    cfg = SimConfig(
        ops=800,
        workers=5,
        active_keys=3,
        max_writes_per_key=30,
        txn=txn,
        p_fail=0.05,
        p_info=0.05,
        p_assign=0.05,
        poll_max=5,
        bugs=frozenset() if bug == "none" else frozenset([bug]),
        p_bug=0.1,
        seed=seed,
    )
    return simulate(cfg)[0]


def _canon(result: dict) -> str:
    result = json.loads(json.dumps(result, default=str))
    (result.get("cycle_search") or {}).pop("seconds", None)
    return json.dumps(result, sort_keys=True)


@pytest.mark.parametrize("bug", ["none", *BUGS])
@pytest.mark.parametrize("ww", [True, False])
@pytest.mark.parametrize("tables", [True, False], ids=["tables", "sorts"])
def test_numpy_and_general_index_agree(bug: str, ww: bool, tables: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tables`: a key's offsets and values span few integers, so the numpy path looks them
    up in tables; without, it sorts them (as for values spread far apart)."""
    ops = _history(bug, txn=bug != "reorder", seed=7)
    opts = CheckOptions(txn=True, ww_deps=ww, sub_via="assign" if ww else "subscribe")
    if not tables:
        monkeypatch.setattr(queue_flat, "_compact", lambda a: False)
    ix = QueueIndex()
    assert queue_flat.flat_index(ix, _gather(ix, ops)), "the numpy path should take an all-integer history"
    fast = check_history(ops, opts)
    monkeypatch.setattr(queue_flat, "flat_index", lambda ix, gathered: False)
    general = check_history(ops, opts)
    assert _canon(fast) == _canon(general)


def test_general_path_takes_values_that_are_not_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    real = queue_flat.flat_index
    monkeypatch.setattr(queue_flat, "flat_index", lambda ix, g: taken.append(real(ix, g)) or taken[-1])

    def op(i: int, p: int, typ: str, value: list) -> Op:
        return Op(index=i, time=i, process=p, type=typ, f="txn", value=value)

    ops = [
        op(0, 0, "invoke", [["send", 1, "a"]]),
        op(1, 0, "ok", [["send", 1, [0, "a"]]]),
        op(2, 1, "invoke", [["poll"]]),
        op(3, 1, "ok", [["poll", {"1": [[0, "a"], [0, "b"]]}]]),
    ]
    ix = build_index(ops)
    assert taken == [False]
    assert ix.orders[1].conflicts == {0: ["a", "b"]}
    r = check_history(ops)
    assert "inconsistent-offsets" in r["error_types"]


@pytest.mark.parametrize("bug", ["none", "duplicate", "reuse-offset", "read-aborted"])
def test_last_read_edges_from_arrays_match_the_loop(bug: str) -> None:
    """The ww-deps wr edges from the read groups' arrays are the loop's, in its order."""
    ix = build_index(_history(bug, txn=True, seed=3))
    assert ix.groups is not None
    opts = CheckOptions(ww_deps=True)
    fast_src, fast_dst, fast_n = cycles._edge_arrays(ix, opts)
    ix.groups = None
    loop_src, loop_dst, loop_n = cycles._edge_arrays(ix, opts)
    assert fast_n == loop_n
    assert fast_src.tolist() == loop_src.tolist() and fast_dst.tolist() == loop_dst.tolist()


def _odd(ops: list[Op], seed: int) -> list[Op]:
    """Some assigns made subscribes (keys all dropped), some reads reversed, cut or rewound."""
    rng = random.Random(seed)
    out: list[Op] = []
    seen: dict[str, list] = {}
    sub: dict[int, bool] = {}
    for o in ops:
        if o.f == "assign":
            if o.type == "invoke":
                sub[o.process] = rng.random() < 0.5
            if sub.get(o.process):
                o = dataclasses.replace(o, f="subscribe")
        elif o.type != "invoke" and isinstance(o.value, list):
            value = []
            for m in o.value:
                if m[0] == "poll" and len(m) > 1 and m[1] and rng.random() < 0.1:
                    reads = {}
                    for k, prs in m[1].items():
                        prs, c = [list(p) for p in prs], rng.random()
                        if c < 0.3 and len(prs) > 1:
                            prs.reverse()
                        elif c < 0.6 and len(prs) > 2:
                            del prs[1]
                        elif seen.get(k):
                            prs = [list(rng.choice(seen[k]))] + prs
                        reads[k] = prs
                    m = [m[0], reads, *m[2:]]
                if m[0] == "poll" and len(m) > 1 and m[1]:
                    for k, prs in m[1].items():
                        seen.setdefault(k, []).extend(prs)
                value.append(m)
            o = dataclasses.replace(o, value=value)
        out.append(o)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_read_order_and_lag_from_arrays_match_the_loops(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Process order, int-poll and the realtime lag, which the numpy path computes on arrays
    (no Txn.pos / max_read), agree with the general path's loops, on histories with subscribes,
    seeks to the beginning, and reads that go back or skip."""
    ops = _odd(_history(["none", "duplicate", "read-aborted"][seed % 3], txn=seed % 2 == 0, seed=seed), seed)
    opts = CheckOptions(txn=True, ww_deps=seed % 2 == 0)
    fast = check_history(ops, opts)
    assert fast["worst_realtime_lag"]["lag"] > 0
    monkeypatch.setattr(queue_flat, "flat_index", lambda ix, gathered: False)
    general = check_history(ops, opts)
    assert _canon(fast) == _canon(general)
    if seed < 2:  # the odd reads make these fire (seeds checked once, kept as examples)
        assert {"nonmonotonic-poll", "int-nonmonotonic-poll", "poll-skip"} <= set(fast["error_types"])


def test_negative_offsets_take_the_general_path() -> None:
    ops = [
        Op(index=0, time=0, process=0, type="invoke", f="txn", value=[["send", 1, 5]]),
        Op(index=1, time=1, process=0, type="ok", f="txn", value=[["send", 1, [-1, 5]]]),
        Op(index=2, time=2, process=1, type="invoke", f="txn", value=[["poll"]]),
        Op(index=3, time=3, process=1, type="ok", f="txn", value=[["poll", {"1": [[-1, 5]]}]]),
    ]
    ix = QueueIndex()
    assert not queue_flat.flat_index(ix, _gather(ix, ops))
    ix = build_index(ops)
    assert ix.groups is None and ix.txns[1].max_read == {1: -1}
    assert check_history(ops)["valid"] is True


def _lag_history(poll_after_assign: bool) -> list[Op]:
    """p1 reads key 1 up to offset 0; offsets 1 of key 1 and 0 of key 3 appear at time 5; p1
    polls nothing at time 100, then assigns itself key 3 only (its run on key 1 ends there)."""

    def op(i: int, t: int, p: int, typ: str, f: str, value: list) -> Op:
        return Op(index=i, time=t, process=p, type=typ, f=f, value=value)

    ops = [
        op(0, 0, 0, "invoke", "send", [["send", 1, 10]]),
        op(1, 1, 0, "ok", "send", [["send", 1, [0, 10]]]),
        op(2, 2, 1, "invoke", "poll", [["poll"]]),
        op(3, 3, 1, "ok", "poll", [["poll", {"1": [[0, 10]]}]]),
        op(4, 4, 0, "invoke", "send", [["send", 1, 11], ["send", 3, 30]]),
        op(5, 5, 0, "ok", "send", [["send", 1, [1, 11]], ["send", 3, [0, 30]]]),
        op(6, 100, 1, "invoke", "poll", [["poll"]]),
        op(7, 101, 1, "ok", "poll", [["poll", {}]]),
        op(8, 200, 1, "invoke", "assign", [3]),
        op(9, 201, 1, "ok", "assign", [3]),
    ]
    if poll_after_assign:  # the run the assign started on key 3 (from offset -1) ends at the end
        ops += [op(10, 300, 1, "invoke", "poll", [["poll"]]), op(11, 301, 1, "ok", "poll", [["poll", {}]])]
    return ops


@pytest.mark.parametrize(
    ("poll_after_assign", "want"),
    [
        (False, {"time": 100e-9, "lag": 95e-9, "process": 1, "key": 1}),
        (True, {"time": 300e-9, "lag": 295e-9, "process": 1, "key": 3}),
    ],
)
def test_lag_of_runs_an_assign_ends_or_starts(
    poll_after_assign: bool, want: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _lag_history(poll_after_assign)
    assert check_history(ops)["worst_realtime_lag"] == pytest.approx(want)
    monkeypatch.setattr(queue_flat, "flat_index", lambda ix, gathered: False)
    assert check_history(ops)["worst_realtime_lag"] == pytest.approx(want)


def _swap_sends(ops: list[Op]) -> list[Op]:
    """The results of the first two ok sends of one process to one key swapped: the later op
    now holds the earlier offset (a process's sends going back, no offset holding two values)."""
    seen: dict[tuple, int] = {}
    for i, o in enumerate(ops):
        if o.type == "ok" and o.f == "send" and len(o.value) == 1:
            at = (o.process, o.value[0][1])
            if at in seen:
                j = seen[at]
                ops = list(ops)
                ops[i], ops[j] = (
                    dataclasses.replace(ops[i], value=ops[j].value),
                    dataclasses.replace(ops[j], value=ops[i].value),
                )
                return ops
            seen[at] = i
    raise AssertionError("no process sent twice to one key")


@pytest.mark.parametrize("bug", ["none", "swap", "reuse-offset", "lose-write"])
def test_send_order_and_unseen_from_arrays_match_the_loops(bug: str) -> None:
    """nonmonotonic-send and unseen from the numpy index's send arrays (sends with and without
    offsets, of ok and info ops) equal their loops over the ops."""
    if bug == "swap":
        ops = _swap_sends(_history("none", txn=False, seed=11))
    else:
        ops = _history(bug, txn=True, seed=11)
    ops = ops[: len(ops) * 2 // 3]  # cut off: the ops in flight become info ops, sends without offsets
    ix = build_index(ops)
    assert ix.groups is not None and ix.groups.bare_sends
    fast = queue_process._send_order_arrays(ix)
    assert fast == queue_process._send_order(ix)
    if bug in ("swap", "reuse-offset"):  # by the arrays; by the KeyOrder (an offset holds two values)
        assert fast
    assert ix.groups.ok_sends_placed
    fast_unseen = queue_lost.unseen_analysis(ix)
    groups, ix.groups = ix.groups, None
    assert fast_unseen == queue_lost.unseen_analysis(ix)
    ix.groups = groups


def _shift_offsets(ops: list[Op], by: int) -> list[Op]:
    out = []
    for o in ops:
        if o.type != "invoke" and isinstance(o.value, list):
            value = []
            for m in o.value:
                if isinstance(m, list) and m[0] == "send" and len(m) > 2 and isinstance(m[2], list):
                    m = ["send", m[1], [m[2][0] + by, m[2][1]]]
                elif isinstance(m, list) and m[0] == "poll" and len(m) > 1 and m[1]:
                    m = ["poll", {k: [[p[0] + by, p[1]] for p in prs] for k, prs in m[1].items()}]
                value.append(m)
            o = dataclasses.replace(o, value=value)
        out.append(o)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_lag_of_offsets_too_large_for_lists(seed: int) -> None:
    """The lag only compares offsets, so moving every offset up by 2**61 changes nothing;
    the numpy path folds such offsets by rank (the loop's lists of 2**61 entries cannot be
    made: on the general path this history's lag is an analysis error)."""
    ops = _odd(_history("none", txn=seed % 2 == 0, seed=seed), seed)
    far = _shift_offsets(ops, 2**61)
    assert build_index(far).groups is not None
    got, want = check_history(far), check_history(ops)
    assert want["worst_realtime_lag"]["lag"] > 0
    assert got["worst_realtime_lag"] == want["worst_realtime_lag"]
    assert got["error_types"] == want["error_types"] and "analysis_errors" not in got

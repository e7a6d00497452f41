"""The numpy index (queue_flat.py) and the general one (queue_index.py) give the same results.

build_index takes the numpy path when every read and send is a pair of 64-bit integers
and the general path otherwise; both must produce identical results.json objects.
"""

from __future__ import annotations

import json

import pytest

from logquake.checker import CheckOptions, check_history, cycles, queue_flat
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
def test_numpy_and_general_index_agree(bug: str, ww: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _history(bug, txn=bug != "reorder", seed=7)
    opts = CheckOptions(txn=True, ww_deps=ww, sub_via="assign" if ww else "subscribe")
    ix = QueueIndex()
    _gather(ix, ops, None, None)
    assert queue_flat.flat_index(ix), "the numpy path should take an all-integer history"
    fast = check_history(ops, opts)
    monkeypatch.setattr(queue_flat, "flat_index", lambda ix: False)
    general = check_history(ops, opts)
    assert _canon(fast) == _canon(general)


def test_general_path_takes_values_that_are_not_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    real = queue_flat.flat_index
    monkeypatch.setattr(queue_flat, "flat_index", lambda ix: taken.append(real(ix)) or taken[-1])

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
    fast = cycles._compact_graph(ix, opts)
    ix.groups = None
    loop = cycles._compact_graph(ix, opts)
    assert [fast[v] for v in range(len(fast))] == [loop[v] for v in range(len(loop))]

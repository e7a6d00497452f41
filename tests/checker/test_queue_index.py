"""What histories the queue index takes, and results that do not depend on how it stores them.

The index holds every read and send in int64 arrays (queue_build.py): offsets must be
integers >= 0 and values 64-bit integers. Anything else makes the verdict unknown, with an
analysis error naming the op, rather than a guess. Within that, results must not change
when values or offsets are spread far apart (the arrays then sort and rank instead of
using tables).
"""

from __future__ import annotations

from typing import Any

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.checker.generate import simulate
from logquake.checker.queue_build import build_index
from logquake.checker.queue_stream import HistoryFile
from logquake.history import Op, write_history
from tests.checker.histories import H, oddly_read, shift_offsets, swap_sends, with_bug


def _history(bug: str, txn: bool, seed: int) -> list[Op]:
    cfg = with_bug(bug, ops=800, workers=5, max_writes_per_key=30, txn=txn, poll_max=5, p_bug=0.1, seed=seed)
    return simulate(cfg)[0]


def _refused(h: H, says: str) -> None:
    r = check_history(h.ops)
    assert r["valid"] == "unknown"
    assert r["unknown_because"] == "an analysis failed: index"
    assert says in r["analysis_errors"]["index"], r["analysis_errors"]


def test_a_value_that_is_not_an_integer_makes_the_verdict_unknown_naming_the_op() -> None:
    h = H()
    h.send(0, 1, 10, offset=0)
    h.poll(1, {1: [(0, 10), (1, "b")]})
    _refused(h, "op 3 (process 1) polled key 1: value 'b' is not a 64-bit integer")
    h.send(0, 1, "a")
    _refused(h, "op 3 (process 1) polled key 1: value 'b' is not a 64-bit integer")  # the first op only


def test_a_failed_send_of_any_value_is_taken() -> None:
    """A failed op's sends only count as aborted writes (G1a); they are not placed in a log."""
    h = H()
    h.send(0, 1, "x", type="fail")
    h.send(0, 1, 10, offset=0)
    h.poll(1, {1: [(0, 10)]})
    assert check_history(h.ops)["valid"] is True


def test_a_negative_offset_makes_the_verdict_unknown_naming_the_op() -> None:
    h = H()
    h.poll(1, {1: [(-1, 5)]})
    _refused(h, "op 1 (process 1) polled key 1: [-1, 5] has no offset (an integer >= 0) to place it by")


def test_a_send_at_a_negative_offset_makes_the_verdict_unknown_naming_the_op() -> None:
    h = H()
    h.send(0, 1, 5, offset=-1)
    _refused(h, "op 1 (process 0) sent to key 1: offset -1 is not an integer >= 0")


def test_a_value_beyond_64_bits_makes_the_verdict_unknown_naming_the_op() -> None:
    h = H()
    h.send(0, 1, 2**64)
    _refused(h, f"op 1 (process 0) sent to key 1: value {2**64} is not a 64-bit integer")


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
def test_lag_of_runs_an_assign_ends_or_starts(poll_after_assign: bool, want: dict) -> None:
    r = check_history(_lag_history(poll_after_assign))
    assert r["worst_realtime_lag"] == pytest.approx(want)
    # each run's peak: key 1's run (ended by the assign), then key 3's when there is one
    peaks = [x for p in r["realtime_lag_over_time"] for x in (p["time"], p["lag"])]
    assert peaks == pytest.approx([100e-9, 95e-9, 300e-9, 295e-9][: 2 + 2 * poll_after_assign])


@pytest.mark.parametrize("seed", range(2))
def test_reads_that_go_back_or_skip_are_reported_in_and_across_ops(seed: int) -> None:
    """Reads reversed, cut or rewound (oddly_read) show up as int- and process-order anomalies."""
    ops = oddly_read(_history(["none", "duplicate"][seed], txn=seed % 2 == 0, seed=seed), seed)
    r = check_history(ops, CheckOptions(txn=True, ww_deps=seed % 2 == 0))
    assert {"nonmonotonic-poll", "int-nonmonotonic-poll", "poll-skip"} <= set(r["error_types"])
    assert r["worst_realtime_lag"]["lag"] > 0


def test_a_process_whose_sends_go_back_is_reported() -> None:
    """Two sends of one process to one key swapped: the later op holds the earlier offset."""
    ops = swap_sends(_history("none", txn=False, seed=11))
    r = check_history(ops, CheckOptions(txn=True))
    (e,) = r["anomalies"]["nonmonotonic-send"]["errs"]
    assert e["delta"] < 0 and "going backwards in the log" in e["explanation"]


@pytest.mark.parametrize("seed", range(3))
def test_lag_of_offsets_too_large_for_lists(seed: int) -> None:
    """The lag only compares offsets, so moving every offset up by 2**61 changes nothing
    (the arrays fold such offsets by rank)."""
    ops = oddly_read(_history("none", txn=seed % 2 == 0, seed=seed), seed)
    far = shift_offsets(ops, 2**61)
    got, want = check_history(far), check_history(ops)
    assert want["worst_realtime_lag"]["lag"] > 0
    assert got["worst_realtime_lag"] == want["worst_realtime_lag"]
    assert got["realtime_lag_over_time"] == want["realtime_lag_over_time"]
    assert got["error_types"] == want["error_types"] and "analysis_errors" not in got


@pytest.mark.parametrize("from_file", [False, True])
def test_an_op_that_never_completed_is_an_info_op_that_may_have_committed(from_file: bool, tmp_path) -> None:
    """Jepsen's reading of an invocation with no completion: info. Its send read by an ok
    poll committed (no no-writer); its send nobody read is no lost write; an assign that
    never completed is no event. Only the history's own ops are counted."""
    h = H()
    h.invoke(0, [("send", 1, 10)])  # never completes; read below
    h.poll(1, {1: [(0, 10)]})
    h.invoke(2, [("send", 1, 11)])  # never completes, never read
    h._add(process=3, type="invoke", f="assign", value=[1])  # never completes
    ops: Any = h.ops
    if from_file:
        write_history(tmp_path / "history.jsonl", h.ops)
        ops = HistoryFile(tmp_path / "history.jsonl")
    r = check_history(ops, CheckOptions(txn=True))
    assert (r["valid"], r["error_types"]) == (True, [])
    assert r["stats"] == {"client_ops": 5, "txns": 3, "keys": 1}
    assert r["info_txn_causes"] == [{"error": "never completed", "count": 2}]


def _polls_of_key_1(second: list) -> list[Op]:
    """p0 sends 10 and 11 to key 1; p1 reads them (spelling the key "1", then "01"), then p2's one op
    reads offset 1 and then offset 0 of it, as `second` spells its micro-ops."""

    def op(i: int, p: int, typ: str, f: str, value: list) -> Op:
        return Op(index=i, time=i, process=p, type=typ, f=f, value=value)

    return [
        op(0, 0, "invoke", "send", [["send", 1, 10], ["send", 1, 11]]),
        op(1, 0, "ok", "send", [["send", 1, [0, 10]], ["send", 1, [1, 11]]]),
        op(2, 1, "invoke", "poll", [["poll"], ["poll"]]),
        op(3, 1, "ok", "poll", [["poll", {"1": [[0, 10]]}], ["poll", {"01": [[1, 11]]}]]),
        op(4, 2, "invoke", "poll", [["poll"] for _ in second]),
        op(5, 2, "ok", "poll", second),
    ]


def test_two_spellings_of_a_key_in_one_poll_are_one_read_of_it() -> None:
    """{"1": .., "01": ..} in one poll map is one key read twice, as two polls of "1" are:
    the op's reads of key 1 are joined, and going back within them is int-nonmonotonic-poll."""
    spelled_twice = _polls_of_key_1([["poll", {"1": [[1, 11]], "01": [[0, 10]]}]])
    ix = build_index(spelled_twice)
    assert ix.txns[2].reads == {1: [[1, 11], [0, 10]]}
    assert (ix.groups.tid.tolist(), ix.groups.length.tolist()) == ([1, 2], [2, 2])
    one_map = check_history(spelled_twice)
    two_polls = check_history(_polls_of_key_1([["poll", {"1": [[1, 11]]}], ["poll", {"1": [[0, 10]]}]]))
    assert "int-nonmonotonic-poll" in two_polls["error_types"]
    for r in (one_map, two_polls):
        del r["cycle_search"]["seconds"]
    assert one_map == two_polls

"""Each anomaly type on tiny literal histories: one that fires, near misses that stay quiet."""

from __future__ import annotations

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.checker.queue_stream import HistoryFile
from logquake.history import Op, load_history, write_history
from tests.checker.histories import H, shared_consumer_polls


def ref(op):
    return {"index": op.index, "process": op.process, "time": op.time, "type": op.type, "f": op.f}


def check(h: H, **opts):
    return check_history(h.ops, CheckOptions(**opts))


def errs(r, typ):
    return r["anomalies"][typ]["errs"]


def strip(e: dict) -> dict:
    return {k: v for k, v in e.items() if k != "explanation"}


def test_clean_history_is_valid():
    h = H()
    h.send(0, 1, 10, 0)
    h.txn(0, [("send", 1, 11, 1), ("send", 2, 20, 0)])
    h.poll(1, {1: [(0, 10), (1, 11)], 2: [(0, 20)]})
    r = check(h)
    assert r["valid"] is True
    assert r["error_types"] == [] and r["bad_error_types"] == [] and r["anomalies"] == {}


def test_nothing_to_check_is_unknown():
    h = H()
    h.nemesis()
    r = check(h)
    assert r["valid"] == "unknown"
    assert "no send, poll or txn" in r["unknown_because"]


def test_inconsistent_offsets():
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10)]})
    h.poll(2, {1: [(0, 99)]})
    r = check(h)
    assert r["bad_error_types"] == ["inconsistent-offsets", "no-writer"]
    assert [strip(e) for e in errs(r, "inconsistent-offsets")] == [
        {"key": 1, "offset": 0, "index": 0, "values": [10, 99]}
    ]


def test_offset_gaps_from_transaction_markers_are_not_errors():
    h = H()
    h.txn(0, [("send", 1, 10, 0), ("send", 1, 11, 1)])  # commit marker at offset 2
    h.send(0, 1, 12, 3)
    h.poll(1, {1: [(0, 10), (1, 11), (3, 12)]})
    r = check(h)
    assert r["valid"] is True, r["anomalies"]


def test_duplicate():
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10), (1, 10)]})
    r = check(h)
    assert "duplicate" in r["bad_error_types"]
    assert [strip(e) for e in errs(r, "duplicate")] == [
        {"key": 1, "value": 10, "count": 2, "offsets": [0, 1]}
    ]
    assert check(h, guarantee="at-least-once")["bad_error_types"] == []


def test_lost_write():
    h = H()
    h.send(0, 1, 10, 0)
    w = h.send(0, 1, 11, 1)
    h.send(0, 1, 12, 2)
    h.poll(1, {1: [(0, 10)]})
    reader = h.poll(2, {1: [(2, 12)]})
    r = check(h)
    assert r["bad_error_types"] == ["lost-write", "unseen"]
    assert [strip(e) for e in errs(r, "lost-write")] == [
        {
            "key": 1,
            "value": 11,
            "index": 1,
            "offset": 1,
            "max_read_index": 2,
            "max_read_value": 12,
            "writer": ref(w),
            "max_read": ref(reader),
        }
    ]
    assert check(h, guarantee="at-most-once")["valid"] is True


def test_not_lost_when_nothing_later_was_read():
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 1, 11, 1)
    h.poll(1, {1: [(0, 10)]})
    r = check(h)
    assert r["error_types"] == ["unseen"]
    assert r["anomalies"]["unseen"]["count"] == 1
    assert check(h, ignore=("unseen",))["valid"] is True


def test_failed_or_unread_info_sends_are_not_lost():
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 1, 11, 1, type="fail")
    h.send(1, 1, 12, None, type="info")
    h.send(2, 1, 13, 2)
    h.poll(3, {1: [(0, 10), (2, 13)]})
    r = check(h)
    assert r["valid"] is True, r["anomalies"]


def test_torn_transaction_is_a_lost_write():
    h = H()
    h.send(0, 2, 31, 1)
    torn = h.txn(1, [("send", 1, 20, 0), ("send", 2, 30, 0)], type="info")
    h.poll(2, {1: [(0, 20)]})  # one send of the info txn was read: it committed
    h.poll(3, {2: [(1, 31)]})
    r = check(h)
    assert "lost-write" in r["bad_error_types"]
    [e] = errs(r, "lost-write")
    assert (e["key"], e["value"], e["writer"]) == (2, 30, ref(torn))


def test_unread_info_transaction_is_not_torn():
    h = H()
    h.send(0, 2, 31, 1)
    h.txn(1, [("send", 1, 20, 0), ("send", 2, 30, 0)], type="info")
    h.poll(3, {2: [(1, 31)]})
    assert check(h)["valid"] is True


def test_g1a_aborted_read():
    h = H()
    w = h.send(0, 1, 10, None, type="fail")
    rd = h.poll(1, {1: [(0, 10)]})
    r = check(h)
    assert r["bad_error_types"] == ["G1a"]
    assert [strip(e) for e in errs(r, "G1a")] == [
        {"key": 1, "value": 10, "writer": ref(w), "reader": ref(rd)}
    ]


def test_info_writes_never_make_g1a():
    h = H()
    h.send(0, 1, 10, None, type="info")
    h.txn(1, [("send", 1, 11, 1), ("send", 2, 20, 0)], type="info")
    h.invoke(2, [("send", 1, 12)])  # never completes
    h.poll(3, {1: [(0, 10), (1, 11), (2, 12)], 2: [(0, 20)]})
    r = check(h)
    assert r["valid"] is True, r["anomalies"]


def test_failed_write_read_only_by_info_poll_is_not_g1a():
    h = H()
    h.send(0, 1, 10, None, type="fail")
    h.poll(1, {1: [(0, 10)]}, type="info")
    assert "G1a" not in check(h)["error_types"]


def test_precommitted_read():
    h = H()
    t = h.txn(0, [("send", 1, 10, 0), ("poll", {1: [(0, 10)]})])
    r = check(h)
    assert r["bad_error_types"] == ["precommitted-read"]
    assert [strip(e) for e in errs(r, "precommitted-read")] == [{"key": 1, "value": 10, "op": ref(t)}]


def test_reading_other_values_in_a_txn_is_not_precommitted():
    h = H()
    h.send(0, 1, 9, 0)
    h.txn(1, [("poll", {1: [(0, 9)]}), ("send", 1, 10, 1)])
    h.poll(2, {1: [(0, 9), (1, 10)]})
    assert check(h)["valid"] is True


def test_int_poll_skip():
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    p = h.poll(1, {1: [(0, 10), (2, 12)]})
    h.poll(2, {1: [(0, 10), (1, 11), (2, 12)]})
    r = check(h)
    assert r["bad_error_types"] == ["int-poll-skip"]
    assert [strip(e) for e in errs(r, "int-poll-skip")] == [
        {"key": 1, "values": [10, 12], "delta": 2, "skipped": [11], "op": ref(p)}
    ]


def test_int_poll_skip_exempt_after_rebalance():
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10), (2, 12)]}, rebalance_log=[{"keys": [1]}])
    h.poll(2, {1: [(0, 10), (1, 11), (2, 12)]})
    assert check(h)["valid"] is True


def test_a_shared_consumers_gaps_and_redeliveries_in_one_poll_are_not_bad():
    shared = check(shared_consumer_polls(redelivered={"1": [0]}), sub_via="subscribe", shared_consumer=True)
    assert shared["valid"] is True
    assert "int-poll-skip" in shared["error_types"]  # reported: the gap went to another worker
    assert "int-nonmonotonic-poll" not in shared["error_types"]  # the server said it delivered 10 again
    # The same polls from a Kafka group, or from consumers that were assigned: a partition
    # has one reader, which must read it in order, whatever the op says of redeliveries.
    for opts in ({"sub_via": "subscribe"}, {"sub_via": "assign", "shared_consumer": True}):
        r = check(shared_consumer_polls(redelivered={"1": [0]}), **opts)
        assert r["valid"] is False and {"int-poll-skip", "int-nonmonotonic-poll"} <= set(r["bad_error_types"]), opts


@pytest.mark.parametrize("marks", [{}, {"redelivered": {"1": [2]}}, {"redelivered": {"2": [0]}},
                                   {"redelivered": {"1": "0"}}])
def test_a_shared_consumer_that_steps_back_to_a_first_delivery_is_nonmonotonic(marks):
    # Unmarked, or another offset or key marked (or a mark that is no list): 10's second
    # delivery is a first one as far as the op knows, and a consumer hands out new messages
    # in log order.
    r = check(shared_consumer_polls(**marks), sub_via="subscribe", shared_consumer=True)
    assert r["valid"] is False and r["bad_error_types"] == ["int-nonmonotonic-poll"]
    assert errs(r, "int-nonmonotonic-poll")[0]["values"] == [12, 10]


@pytest.mark.parametrize("marks", [{"redelivered": {"1": [0]}}, {}])
def test_a_redelivery_mark_counts_when_the_history_is_checked_from_its_file(tmp_path, marks):
    path = tmp_path / "history.jsonl"
    write_history(path, shared_consumer_polls(**marks).ops)
    opts = CheckOptions(sub_via="subscribe", shared_consumer=True)
    streamed, in_memory = check_history(HistoryFile(path), opts), check_history(load_history(path), opts)
    assert streamed["valid"] is in_memory["valid"] is (marks != {})
    assert streamed["error_types"] == in_memory["error_types"]


def test_a_shared_consumer_still_loses_a_value_nobody_read():
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10), (2, 12)]})
    r = check(h, sub_via="subscribe", shared_consumer=True)
    assert r["valid"] is False and "lost-write" in r["bad_error_types"]


def test_int_nonmonotonic_poll():
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 1, 11, 1)
    p = h.poll(1, {1: [(0, 10), (1, 11), (0, 10)]})
    r = check(h)
    assert r["bad_error_types"] == ["int-nonmonotonic-poll"]
    assert [strip(e) for e in errs(r, "int-nonmonotonic-poll")] == [
        {"key": 1, "values": [11, 10], "delta": -1, "op": ref(p)}
    ]


def test_int_send_skip_is_reported_but_allowed():
    h = H()
    h.invoke(0, [("send", 1, 10), ("send", 1, 12)])
    h.invoke(1, [("send", 1, 11)])
    t = h.complete(0, "ok", [("send", 1, 10, 0), ("send", 1, 12, 2)])
    h.complete(1, "ok", [("send", 1, 11, 1)])
    h.poll(2, {1: [(0, 10), (1, 11), (2, 12)]})
    r = check(h)
    assert r["valid"] is True
    # The interleaved send also makes a write cycle: T1 <ww T2 <ww T1.
    assert r["error_types"] == ["G0", "int-send-skip"]
    assert [strip(e) for e in errs(r, "int-send-skip")] == [
        {"key": 1, "values": [10, 12], "delta": 2, "skipped": [11], "op": ref(t)}
    ]


def test_int_nonmonotonic_send():
    h = H()
    t = h.txn(0, [("send", 1, 10, 1), ("send", 1, 11, 0)])
    h.poll(2, {1: [(0, 11), (1, 10)]})
    r = check(h)
    assert r["bad_error_types"] == ["int-nonmonotonic-send"]
    assert [strip(e) for e in errs(r, "int-nonmonotonic-send")] == [
        {"key": 1, "values": [10, 11], "delta": -1, "op": ref(t)}
    ]


def _three_sent(h: H) -> None:
    for i in range(3):
        h.send(0, 1, 10 + i, i)


def test_poll_skip():
    h = H()
    _three_sent(h)
    a = h.poll(1, {1: [(0, 10)]})
    b = h.poll(1, {1: [(2, 12)]})
    h.poll(2, {1: [(0, 10), (1, 11), (2, 12)]})
    r = check(h)
    assert r["bad_error_types"] == ["poll-skip"]
    assert [strip(e) for e in errs(r, "poll-skip")] == [
        {"key": 1, "values": [10, 12], "delta": 2, "skipped": [11], "ops": [ref(a), ref(b)]}
    ]
    sub = check(h, sub_via="subscribe")
    assert sub["valid"] is True and sub["error_types"] == ["poll-skip"]


def test_reassign_forgets_position_and_failed_polls_do_not_advance_it():
    h = H()
    _three_sent(h)
    h.poll(1, {1: [(0, 10)]})
    h.poll(1, {1: [(1, 11)]}, type="fail")  # seeks back to offset 1 afterwards
    h.poll(1, {1: [(1, 11)]})
    h.assign(1, [2])
    h.assign(1, [1])
    h.poll(1, {1: [(2, 12)]})  # forgot key 1 when it was unassigned
    h.assign(1, [1], seek_to_beginning=True)
    h.poll(1, {1: [(0, 10), (1, 11), (2, 12)]})
    assert check(h)["valid"] is True


def test_nonmonotonic_poll():
    h = H()
    _three_sent(h)
    a = h.poll(1, {1: [(0, 10), (1, 11)]})
    b = h.poll(1, {1: [(0, 10), (1, 11), (2, 12)]})
    r = check(h)
    assert r["bad_error_types"] == ["nonmonotonic-poll"]
    assert [strip(e) for e in errs(r, "nonmonotonic-poll")] == [
        {"key": 1, "values": [11, 10], "delta": -1, "ops": [ref(a), ref(b)]}
    ]


def test_nonmonotonic_send():
    h = H()
    a = h.send(0, 1, 10, 1)
    b = h.send(0, 1, 11, 0)
    h.poll(1, {1: [(0, 11), (1, 10)]})
    r = check(h)
    assert r["bad_error_types"] == ["nonmonotonic-send"]
    assert [strip(e) for e in errs(r, "nonmonotonic-send")] == [
        {"key": 1, "values": [10, 11], "delta": -1, "ops": [ref(a), ref(b)]}
    ]


def test_sends_of_different_processes_may_interleave():
    h = H()
    h.send(0, 1, 10, 1)
    h.send(1, 1, 11, 0)
    h.poll(2, {1: [(0, 11), (1, 10)]})
    assert check(h)["valid"] is True


def test_unseen():
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 2, 20, 0)
    h.poll(1, {2: [(0, 20)]})
    r = check(h)
    assert r["bad_error_types"] == ["unseen"]
    assert r["anomalies"]["unseen"]["count"] == 1
    assert [strip(e) for e in errs(r, "unseen")] == [{"key": 1, "count": 1, "values": [10]}]
    assert [p["unseen"] for p in r["unseen_over_time"]] == [1, 2, 1]


def _g0(h: H):
    h.invoke(0, [("send", 1, 10), ("send", 2, 21)])
    h.invoke(1, [("send", 1, 11), ("send", 2, 20)])
    t1 = h.complete(0, "ok", [("send", 1, 10, 0), ("send", 2, 21, 1)])
    t2 = h.complete(1, "ok", [("send", 1, 11, 1), ("send", 2, 20, 0)])
    h.poll(2, {1: [(0, 10), (1, 11)], 2: [(0, 20), (1, 21)]})
    return t1, t2


def test_g0_write_cycle_is_reported_and_allowed():
    h = H()
    t1, t2 = _g0(h)
    r = check(h)
    assert r["valid"] is True
    assert r["error_types"] == ["G0"]
    [e] = errs(r, "G0")
    assert e["cycle"] == [ref(t1), ref(t2)]
    assert [(s["from"], s["to"], s["type"], s["key"]) for s in e["steps"]] == [
        ("T1", "T2", "ww", 1),
        ("T2", "T1", "ww", 2),
    ]
    assert "T1 sent 10 to key 1 just before T2 sent 11 to it" in e["explanation"]
    assert "However, T2 < T1" in e["explanation"]


def _wr_cycle(h: H):
    h.invoke(0, [("send", 1, 10), ("poll",)])
    h.invoke(1, [("send", 2, 20), ("poll",)])
    t1 = h.complete(0, "ok", [("send", 1, 10, 0), ("poll", {2: [(0, 20)]})])
    t2 = h.complete(1, "ok", [("send", 2, 20, 0), ("poll", {1: [(0, 10)]})])
    return t1, t2


def test_g1c_is_bad_without_ww_deps():
    h = H()
    t1, t2 = _wr_cycle(h)
    r = check(h, ww_deps=False)
    assert r["bad_error_types"] == ["G1c"]
    [e] = errs(r, "G1c")
    assert {s["type"] for s in e["steps"]} == {"wr"}
    assert "polled 20 from key 2, which T" in e["explanation"]
    with_ww = check(h)  # no edge of it is inferred: bad under its own name
    assert with_ww["valid"] is False and with_ww["error_types"] == ["G1c", "G1c-wr"]
    assert with_ww["bad_error_types"] == ["G1c-wr"]


def test_no_cycle_without_circular_flow():
    h = H()
    h.txn(0, [("send", 1, 10, 0), ("poll", {})])
    h.txn(1, [("send", 2, 20, 0), ("poll", {1: [(0, 10)]})])
    h.poll(2, {2: [(0, 20)]})
    r = check(h, ww_deps=False)
    assert r["valid"] is True and r["error_types"] == []


def test_g1c_realtime_read_from_the_future():
    h = H()
    reader = h.poll(1, {1: [(0, 10)]})
    writer = h.send(2, 1, 10, 0)  # invoked after the read completed
    r = check(h, ww_deps=False)
    assert r["bad_error_types"] == ["G1c-realtime"]
    [e] = errs(r, "G1c-realtime")
    assert {s["type"] for s in e["steps"]} == {"wr", "realtime"}
    assert {c["index"] for c in e["cycle"]} == {reader.index, writer.index}
    assert "completed (op 1) before T" in e["explanation"]


def test_g1c_process_same_process():
    h = H()
    h.poll(1, {1: [(0, 10)]})
    h.send(1, 1, 10, 0)
    r = check(h, ww_deps=False)
    assert "G1c-process" in r["bad_error_types"]
    [e] = errs(r, "G1c-process")
    assert {s["type"] for s in e["steps"]} == {"wr", "process"}


def test_g0_realtime():
    h = H()
    h.send(0, 1, 10, 1)
    h.send(1, 1, 11, 0)  # invoked after 10 was acked, yet lands before it
    h.poll(2, {1: [(0, 11), (1, 10)]})
    r = check(h)
    assert r["valid"] is True
    assert r["error_types"] == ["G0-realtime"]


def test_info_op_never_precedes_anything_in_realtime():
    h = H()
    h.send(0, 1, 10, None, type="info")
    h.poll(1, {1: [(0, 11), (1, 10)]})
    h.send(2, 1, 11, 0)
    r = check(h)
    assert not [t for t in r["error_types"] if t.endswith("realtime") and t.startswith("G0")]


def test_examples_are_capped_but_counted():
    h = H()
    for i in range(20):
        h.send(0, 1, i, i)
    h.poll(1, {1: [(19, 19)]})
    r = check(h, max_examples=3)
    lw = r["anomalies"]["lost-write"]
    assert lw["count"] == 19 and len(lw["errs"]) == 3


def test_a_crashing_analysis_is_unknown_with_its_error():
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10)]})
    h.ops.append(h.ops[-1].__class__(index=99, time=99, process=5, type="ok", f="poll", value=[["poll", 17]]))
    r = check(h)
    assert r["valid"] == "unknown"
    assert "index" in r["analysis_errors"]


def test_cycle_search_out_of_time_is_unknown():
    h = H()
    _g0(h)
    r = check(h, time_budget=0.0)
    assert r["valid"] == "unknown"
    assert "time budget" in r["unknown_because"]


def test_invalid_beats_unknown():
    h = H()
    _g0(h)
    h.send(3, 1, 99, None, type="fail")
    h.poll(4, {1: [(2, 99)]})
    r = check(h, time_budget=0.0)
    assert r["valid"] is False


def test_worst_realtime_lag():
    h = H()
    h.send(0, 1, 10, 0)  # ok at 1 ms
    h.send(0, 1, 11, 1)  # ok at 3 ms: offset 0 no longer the tail
    h.poll(1, {1: [(0, 10)]})  # invoked at 4 ms
    h.poll(1, {})  # invoked at 6 ms, still at offset 0
    h.poll(2, {1: [(0, 10), (1, 11)]})
    lag = check(h)["worst_realtime_lag"]
    assert lag == {"time": 0.006, "lag": 0.003, "process": 1, "key": 1}


def test_info_causes():
    h = H()
    h.send(0, 1, 10, None, type="info", error="timeout")
    h.send(1, 1, 11, None, type="info", error="timeout")
    h.send(2, 1, 12, None, type="info", error="disconnected")
    assert check(h)["info_txn_causes"] == [
        {"error": "timeout", "count": 2},
        {"error": "disconnected", "count": 1},
    ]


def test_cycles_are_all_counted_but_only_the_first_explained():
    h = H()
    _g0(h)
    h.invoke(5, [("send", 3, 10), ("send", 4, 21)])
    h.invoke(6, [("send", 3, 11), ("send", 4, 20)])
    h.complete(5, "ok", [("send", 3, 10, 0), ("send", 4, 21, 1)])
    h.complete(6, "ok", [("send", 3, 11, 1), ("send", 4, 20, 0)])
    h.poll(7, {3: [(0, 10), (1, 11)], 4: [(0, 20), (1, 21)]})
    r = check(h, max_examples=1)
    assert r["anomalies"]["G0"]["count"] == 2
    assert len(r["anomalies"]["G0"]["errs"]) == 1


def test_a_read_without_an_offset_makes_the_verdict_unknown_naming_its_op():
    """Reads are placed in the log by offset: one without is refused, not placed by a guess."""
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 1, 11, 1)
    h.poll(1, {1: [(None, 10), (None, 11)]})
    h.poll(2, {1: [(0, 10), (1, 11)]})
    r = check(h)
    assert r["valid"] == "unknown"
    assert "op 5 (process 1) polled key 1: [None, 10] has no offset" in r["analysis_errors"]["index"]


@pytest.mark.parametrize("pairs", [[[5]], [[0, 10], [5, 6, 7]], [7]])
def test_a_read_that_is_not_a_pair_names_its_op(pairs):
    """The verdict is unknown and says which op holds the bad read, whichever path sees it."""
    h = H()
    h.send(0, 1, 10, 0)
    h.ops.append(Op(index=len(h.ops), time=50, process=3, type="invoke", f="poll", value=[["poll"]]))
    h.ops.append(Op(index=len(h.ops), time=51, process=3, type="ok", f="poll", value=[["poll", {"1": pairs}]]))
    r = check(h)
    assert r["valid"] == "unknown"
    assert f"op {len(h.ops) - 1} (process 3) polled key 1" in r["analysis_errors"]["index"]
    assert "is not an [offset, value] pair" in r["analysis_errors"]["index"]
    assert r["unknown_because"] == "an analysis failed: index"

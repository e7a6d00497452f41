"""The final read: every acknowledged write must be in it (checker/final_read.py).

Tiny literal histories, the drain's ops marked `"final": true` as the runner records them:
the final assign carries each key's end of the log (`ends`), the final polls the consumer's
position per key (`positions`).
"""

from __future__ import annotations

from typing import Any

from logquake.checker import CheckOptions, check_history
from logquake.checker.final_read import analyse
from tests.checker.histories import H

POWER_LOSS = "power-loss: n1: unsynced writes dropped; n2: unsynced writes dropped; n3: unsynced writes dropped"


def final_assign(h: H, p: Any, keys: list, ends: dict | None) -> None:
    extra: dict[str, Any] = {"seek_to_beginning": True, "final": True}
    h._add(process=p, type="invoke", f="assign", value=keys, extra=dict(extra))
    if ends is not None:
        extra["ends"] = {str(k): e for k, e in ends.items()}
    h._add(process=p, type="ok", f="assign", value=keys, extra=extra)


def final_poll(h: H, p: Any, reads: dict, positions: dict | None = None) -> None:
    extra: dict[str, Any] = {"final": True}
    if positions is not None:
        extra["positions"] = {str(k): pos for k, pos in positions.items()}
    h._add(process=p, type="invoke", f="poll", value=[["poll"]], extra={"final": True})
    read = {str(k): [list(pair) for pair in pairs] for k, pairs in reads.items()}
    h._add(process=p, type="ok", f="poll", value=[["poll", read]], extra=extra)


def the_issues_history(*, marked: bool = True) -> H:
    """Three acknowledged sends to key 0, a poll reading them, a power loss of every node,
    then a fresh consumer whose polls from the beginning return nothing."""
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
    h.poll(1, {0: [(0, 1), (1, 2), (2, 3)]})
    h.nemesis("start-disk:power-loss", POWER_LOSS)
    h.nemesis("stop-disk:power-loss", "started n1,n2,n3")
    if marked:
        final_assign(h, 5, [0], {0: 0})
        final_poll(h, 5, {}, {})
    else:
        h.assign(5, [0], seek_to_beginning=True)
        h.poll(5, {})
    return h


def test_the_issues_history_is_invalid_with_lost_values():
    h = the_issues_history()
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is False
    assert r["bad_error_types"] == ["lost"]
    lost = r["anomalies"]["lost"]
    assert lost["count"] == 3
    first = lost["errs"][0]
    poll = h.ops[7]  # the ok poll that read all three
    assert first["key"] == 0 and first["value"] == 1 and first["offset"] == 0
    assert first["read"] == "earlier"
    assert first["last_read"] == {"index": poll.index, "process": 1, "time": poll.time, "type": "ok", "f": "poll"}
    assert first["acknowledged"] == {"index": 1, "process": 0, "time": h.ops[1].time, "type": "ok", "f": "send"}
    assert first["position"] == "suffix"  # nothing acknowledged after it survived
    assert [f["f"] for f in first["faults"]] == ["start-disk:power-loss", "stop-disk:power-loss"]
    assert first["final_read"]["f"] == "assign" and first["end"] == 0
    assert first["explanation"] == (
        "value 1 of key 0 at offset 0 was acknowledged by op 1 (0.001 s), read by op 7 (0.007 s), "
        "and is absent from the final read; the log ends at offset 0; faults in between: "
        f"start-disk:power-loss {POWER_LOSS}, stop-disk:power-loss started n1,n2,n3")
    assert r["final_read"]["lost"] == 3 and r["final_read"]["lost_read_earlier"] == 3
    assert r["final_read"]["lost_by_position"] == {"prefix": 0, "middle": 0, "suffix": 3}
    assert r["final_read"]["lost_over_time"][-1]["lost"] == 3


def test_the_issues_history_without_markers_is_valid_as_before_and_says_why():
    r = check_history(the_issues_history(marked=False).ops, CheckOptions())
    assert r["valid"] is True
    assert "lost" not in r["anomalies"]
    assert r["final_read"]["ran"] is False
    assert "no final read" in r["final_read"]["why"]


def test_lost_is_tolerated_at_most_once_as_lost_write_is():
    r = check_history(the_issues_history().ops, CheckOptions(guarantee="at-most-once"))
    assert r["valid"] is True
    assert r["error_types"] == ["lost"] and r["bad_error_types"] == []
    for g in ("at-least-once", "idempotent", "exactly-once"):
        assert check_history(the_issues_history().ops, CheckOptions(guarantee=g))["valid"] is False, g


def test_a_final_read_that_returns_everything_is_valid():
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
    final_assign(h, 5, [0], {0: 3})
    final_poll(h, 5, {0: [(0, 1), (1, 2), (2, 3)]}, {0: 3})
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is True, r
    assert r["final_read"] | {"lost_over_time": []} == {
        "ran": True, "keys": 1, "complete_keys": 1, "incomplete_keys": [], "acknowledged": 3, "lost": 0,
        "lost_read_earlier": 0, "lost_never_read": 0, "lost_by_position": {"prefix": 0, "middle": 0, "suffix": 0},
        "lost_over_time": [],
    }


def test_a_final_read_that_stopped_before_the_end_makes_that_key_unknown():
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
    h.send(0, 1, 1, 0)
    h.poll(1, {0: [(0, 1), (1, 2), (2, 3)], 1: [(0, 1)]})  # (so nothing is unseen)
    final_assign(h, 5, [0, 1], {0: 3, 1: 1})
    final_poll(h, 5, {0: [(0, 1)], 1: [(0, 1)]}, {0: 1, 1: 1})  # key 0 stopped at offset 1 of 3
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] == "unknown"
    assert "lost" not in r["anomalies"]
    assert r["final_read"]["incomplete_keys"] == [0]
    assert r["unknown_because"].startswith("the final read of key(s) 0 did not reach the end of the log")


def test_a_lost_value_in_the_middle_never_read():
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
    h.nemesis("start-kill", "n1")
    final_assign(h, 5, [0], {0: 3})
    final_poll(h, 5, {0: [(0, 1), (2, 3)]}, {0: 3})
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is False
    (e,) = r["anomalies"]["lost"]["errs"]
    assert (e["value"], e["read"], e["position"], e["last_read"]) == (2, "never", "middle", None)
    assert [f["f"] for f in e["faults"]] == ["start-kill"]


def test_a_lost_prefix():
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
    final_assign(h, 5, [0], {0: 3})
    final_poll(h, 5, {0: [(2, 3)]}, {0: 3})
    r = check_history(h.ops, CheckOptions())
    assert [(e["value"], e["position"]) for e in r["anomalies"]["lost"]["errs"]] == [(1, "prefix"), (2, "prefix")]


def test_the_position_passes_markers_no_poll_returns():
    """Under read_committed the log may end in a commit marker: the position says the read is done."""
    h = H()
    h.txn(0, [("send", 0, 1, 0), ("send", 0, 2, 1)])  # a commit marker follows at offset 2
    final_assign(h, 5, [0], {0: 3})
    final_poll(h, 5, {0: [(0, 1), (1, 2)]}, {0: 3})
    assert check_history(h.ops, CheckOptions(txn=True))["valid"] is True


def test_without_recorded_ends_the_highest_known_offset_stands_in():
    h = H()
    for off, v in enumerate((1, 2)):
        h.send(0, 0, v, off)
    final_assign(h, 5, [0], None)
    final_poll(h, 5, {0: [(0, 1), (1, 2)]})
    assert check_history(h.ops, CheckOptions())["valid"] is True
    h2 = H()
    for off, v in enumerate((1, 2)):
        h2.send(0, 0, v, off)
    final_assign(h2, 5, [0], None)
    final_poll(h2, 5, {0: [(0, 1)]})
    assert analyse(h2.ops).incomplete_keys == [0]


def test_one_complete_final_read_is_enough_and_an_incomplete_one_proves_nothing():
    h = H()
    for off, v in enumerate((1, 2)):
        h.send(0, 0, v, off)
    final_assign(h, 5, [0], {0: 2})
    final_poll(h, 5, {0: [(0, 1)]}, {0: 1})  # this worker ran out of time
    final_assign(h, 6, [0], {0: 2})
    final_poll(h, 6, {0: [(0, 1), (1, 2)]}, {0: 2})
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is True and r["final_read"]["incomplete_keys"] == []


def test_unacknowledged_writes_are_not_lost():
    h = H()
    h.send(0, 0, 1, 0)
    h.send(1, 0, 2, None, type="info")
    h.send(2, 0, 3, None, type="fail")
    final_assign(h, 5, [0], {0: 1})
    final_poll(h, 5, {0: [(0, 1)]}, {0: 1})
    assert check_history(h.ops, CheckOptions())["valid"] is True


def test_a_key_left_unread_by_the_final_poll_is_unknown_alone():
    # Key 1's stream did not answer the final poll (no leader): it is unread, key 0 complete.
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
        h.send(0, 1, v, off)
    h.poll(1, {0: [(0, 1), (1, 2), (2, 3)], 1: [(0, 1), (1, 2), (2, 3)]})
    final_assign(h, 5, [0, 1], {0: 3, 1: None})
    h._add(process=5, type="invoke", f="poll", value=[["poll"]], extra={"final": True})
    h._add(process=5, type="ok", f="poll", value=[["poll", {"0": [[0, 1], [1, 2], [2, 3]]}]],
           extra={"final": True, "positions": {"0": 3}, "unread": {"1": "TimeoutError: nats: timeout"}})
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] == "unknown", r
    assert r["final_read"]["incomplete_keys"] == [1] and r["final_read"]["complete_keys"] == 1
    assert r["unknown_because"].startswith("the final read of key(s) 1 did not reach the end of the log")


def test_a_value_lost_from_a_key_that_answered_is_lost_though_another_key_is_unread():
    h = H()
    for off, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, off)
        h.send(0, 1, v, off)
    h.poll(1, {0: [(0, 1), (1, 2), (2, 3)], 1: [(0, 1), (1, 2), (2, 3)]})
    final_assign(h, 5, [0, 1], {0: 2, 1: None})  # key 0's log lost its tail
    h._add(process=5, type="invoke", f="poll", value=[["poll"]], extra={"final": True})
    h._add(process=5, type="ok", f="poll", value=[["poll", {"0": [[0, 1], [1, 2]]}]],
           extra={"final": True, "positions": {"0": 2}, "unread": {"1": "TimeoutError: nats: timeout"}})
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is False and r["bad_error_types"] == ["lost"], r
    assert [(e["key"], e["value"]) for e in r["anomalies"]["lost"]["errs"]] == [(0, 3)]
    assert r["final_read"]["incomplete_keys"] == [1]


def _read_across_a_fault(stopped_before_the_read: bool, ended_by: str = "stop-disk:power-loss") -> dict[str, Any]:
    """A poll invoked before a power loss began and answered after its start was recorded,
    then the final read missing what it read; the fault stopped (or healed) before that poll or not."""
    h = H()
    h.send(0, 0, 1, 0)
    h.nemesis("start-disk:power-loss", POWER_LOSS)
    if stopped_before_the_read:
        h.nemesis(ended_by, "started n1,n2,n3")
    h.poll(1, {0: [(0, 1)]})
    h.nemesis("start-kill", "n2")
    final_assign(h, 5, [0], {0: 0})
    final_poll(h, 5, {}, {})
    (e,) = check_history(h.ops, CheckOptions())["anomalies"]["lost"]["errs"]
    return e


def test_a_fault_in_effect_when_the_value_was_last_read_is_named():
    e = _read_across_a_fault(stopped_before_the_read=False)
    assert [f["f"] for f in e["faults"]] == ["start-disk:power-loss", "start-kill"]
    assert "faults in between: start-disk:power-loss power-loss: n1" in e["explanation"]


def test_a_fault_over_before_the_value_was_last_read_is_not_named():
    e = _read_across_a_fault(stopped_before_the_read=True)
    assert [f["f"] for f in e["faults"]] == ["start-kill"]


def test_a_fault_healed_before_the_value_was_last_read_is_not_named():
    e = _read_across_a_fault(stopped_before_the_read=True, ended_by="heal")
    assert [f["f"] for f in e["faults"]] == ["start-kill"]

"""The final read from every node (checker/final_read.py `nodes`): per node, which
acknowledged values that node did not return, apart from the combined verdict.

Literal histories: the drain's combined final read (ops marked `"final": true`) and one
more final read per node (also marked `"node"`), whose assign records the node's own ends
and the keys it holds no replica of (`not_held`).
"""

from __future__ import annotations

from typing import Any

from logquake.checker import CheckOptions, check_history
from tests.checker.histories import H


def final_read(h: H, p: Any, ends: dict, reads: dict, *, node: str | None = None, not_held: tuple = ()) -> None:
    """One final read: an assign of every key in `ends`, then one poll reading `reads` and
    reaching each key's position (the offset after its last read, else its end)."""
    mark: dict[str, Any] = {"final": True}
    if node is not None:
        mark["node"] = node
    keys = sorted(ends)
    done: dict[str, Any] = {**mark, "seek_to_beginning": True, "ends": {str(k): e for k, e in ends.items()}}
    if node is not None:
        done["not_held"] = list(not_held)
    h._add(process=p, type="invoke", f="assign", value=keys, extra={**mark, "seek_to_beginning": True})
    h._add(process=p, type="ok", f="assign", value=keys, extra=done)
    positions = {str(k): (max(o for o, _ in reads[k]) + 1 if reads.get(k) else e) for k, e in ends.items()}
    h._add(process=p, type="invoke", f="poll", value=[["poll"]], extra=dict(mark))
    read = {str(k): [list(pair) for pair in pairs] for k, pairs in reads.items()}
    h._add(process=p, type="ok", f="poll", value=[["poll", read]], extra={**mark, "positions": positions})


def three_sends() -> H:
    h = H()
    for off, v in ((1, 1), (2, 2), (3, 3)):
        h.send(0, 0, v, off)
    return h


ALL = {0: [(1, 1), (2, 2), (3, 3)]}


def test_every_node_holding_everything_is_complete_and_the_verdict_unchanged():
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    for i, node in enumerate(("n1", "n2", "n3")):
        final_read(h, 6 + i, {0: 4}, ALL, node=node)
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is True
    nodes = r["final_read"]["nodes"]
    assert sorted(nodes) == ["n1", "n2", "n3"]
    for entry in nodes.values():
        assert entry["status"] == "complete" and entry["missing"] == 0 and entry["incomplete_keys"] == []
        assert entry["keys"] == 1 and entry["complete_keys"] == 1 and entry["examples"] == []


def test_a_hole_below_the_nodes_own_end_is_lost_on_node_and_its_read_a_skip():
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    final_read(h, 6, {0: 4}, ALL, node="n1")
    final_read(h, 7, {0: 4}, {0: [(1, 1), (3, 3)]}, node="n2")  # says it ends at 4, lacks offset 2
    r = check_history(h.ops, CheckOptions())
    # The combined read holds every value (no `lost`), but n2's reader read around a value
    # in the log: the queue analysis judges that read as it judges every read.
    assert r["valid"] is False and r["bad_error_types"] == ["int-poll-skip"]
    n2 = r["final_read"]["nodes"]["n2"]
    assert n2["status"] == "lost-on-node" and n2["lost-on-node"] == 1 and n2["behind"] == 0
    assert n2["examples"][0] | {"acknowledged": None} == {
        "key": 0, "value": 2, "offset": 2, "end": 4, "kind": "lost-on-node", "acknowledged": None}
    assert n2["examples"][0]["acknowledged"]["f"] == "send"
    assert r["final_read"]["nodes"]["n1"]["status"] == "complete"


def test_a_node_whose_log_stops_short_is_behind_not_lost_on_node():
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    final_read(h, 6, {0: 2}, {0: [(1, 1)]}, node="n3")  # a follower still catching up: ends at 2
    n3 = check_history(h.ops, CheckOptions())["final_read"]["nodes"]["n3"]
    assert n3["status"] == "behind" and n3["behind"] == 2 and n3["lost-on-node"] == 0
    assert [(e["value"], e["kind"]) for e in n3["examples"]] == [(2, "behind"), (3, "behind")]


def test_a_node_read_that_did_not_reach_its_end_is_unknown_for_that_node_never_a_pass():
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    final_read(h, 6, {0: None}, {}, node="n2")  # the node never answered its own end
    h._add(process=7, type="invoke", f="assign", value=[0], extra={"final": True, "node": "n3"})
    h._add(process=7, type="ok", f="assign", value=[0],
           extra={"final": True, "node": "n3", "ends": {"0": 4}, "not_held": []})  # no poll reached 4
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is True
    for node in ("n2", "n3"):
        entry = r["final_read"]["nodes"][node]
        assert entry["status"] == "unknown" and entry["incomplete_keys"] == [0] and entry["complete_keys"] == 0


def test_keys_a_node_holds_no_replica_of_are_left_out_for_it():
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    final_read(h, 6, {0: 1}, {}, node="n4", not_held=(0,))
    n4 = check_history(h.ops, CheckOptions())["final_read"]["nodes"]["n4"]
    assert n4 == {"status": "complete", "keys": 0, "complete_keys": 0, "incomplete_keys": [], "not_held_keys": 1,
                  "missing": 0, "lost-on-node": 0, "behind": 0, "examples": []}


def test_the_combined_lost_verdict_ignores_the_node_reads():
    """A split brain's shape: the combined read lost value 3; n1 still has it. `lost` is
    judged on the combined read alone, and each node's figures say who holds what."""
    h = three_sends()
    final_read(h, 5, {0: 3}, {0: [(1, 1), (2, 2)]})
    final_read(h, 6, {0: 4}, ALL, node="n1")
    final_read(h, 7, {0: 3}, {0: [(1, 1), (2, 2)]}, node="n2")
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] is False and r["bad_error_types"] == ["lost"]
    assert r["anomalies"]["lost"]["count"] == 1
    nodes = r["final_read"]["nodes"]
    assert nodes["n1"]["status"] == "complete"
    assert nodes["n2"]["status"] == "behind" and nodes["n2"]["examples"][0]["value"] == 3


def test_a_history_without_node_reads_has_no_nodes_entry():
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    assert "nodes" not in check_history(h.ops, CheckOptions())["final_read"]

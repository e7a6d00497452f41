"""Group state in a __consumer_offsets log: what is written reads back, markers included."""

from __future__ import annotations

import struct

from logquake.broker import group_offsets as go
from logquake.broker import offsets_log
from logquake.broker.batches import control_batch
from logquake.broker.groups import Group, GroupConfig


def at(batch: bytes, base_offset: int) -> bytes:
    """The batch as the leader stores it: base offset rewritten (outside the CRC)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def test_offsets_groups_and_markers_round_trip() -> None:
    k1, k2 = go.OffsetKey("g", "t", 0), go.OffsetKey("g", "t", 1)
    plain = offsets_log.encode_offsets([
        go.OffsetCommitRecord(key=k1, value=go.CommittedOffset(offset=10, metadata="m", leader_epoch=2)),
        go.OffsetCommitRecord(key=k2, value=go.CommittedOffset(offset=20))])
    txn = offsets_log.encode_offsets([go.OffsetCommitRecord(key=k1, value=go.CommittedOffset(offset=30),
                                                            producer_id=77)])
    g = Group(group_id="g", config=GroupConfig(initial_rebalance_delay_ms=0))
    g.join(member_id="", new_member_id="a", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
           protocol_type="consumer", protocols=[("range", b"\x00\x01")], now_ms=0)
    g.sync(member_id="a", generation=1, assignments={"a": b"\xff"}, now_ms=0)
    group = offsets_log.encode_group(g.snapshot())

    state = go.EMPTY
    state = offsets_log.apply_batch(state, at(plain, 0))
    state = offsets_log.apply_batch(state, at(txn, 2))
    state = offsets_log.apply_batch(state, at(group, 3))
    assert go.fetch(state, k1)[0] == go.CommittedOffset(offset=10, metadata="m", leader_epoch=2,
                                                         commit_ms=0, log_offset=0)
    assert go.fetch(state, k1, require_stable=True)[1].name == "UNSTABLE_OFFSET_COMMIT"
    assert state.groups["g"] == g.snapshot()
    committed = offsets_log.apply_batch(state, at(control_batch(commit=True, producer_id=77, producer_epoch=0), 4))
    assert go.fetch(committed, k1, require_stable=True)[0].offset == 30
    aborted = offsets_log.apply_batch(state, at(control_batch(commit=False, producer_id=77, producer_epoch=0), 4))
    assert go.fetch(aborted, k1, require_stable=True)[0].offset == 10
    restored = Group.restore(state.groups["g"], now_ms=5)
    assert restored.sync(member_id="a", generation=1, assignments=None, now_ms=6)[0].assignment == b"\xff"

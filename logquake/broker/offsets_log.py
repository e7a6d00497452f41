"""How consumer-group state is written in a `__consumer_offsets` partition, and read back.

Records are v2 record batches like any other partition's, so Raft, storage and the partition
state machine need nothing special; keys and values are small JSON objects (readable in a
dump of the log; these records are few next to the data):

    key {"t": "offset", "g": group, "topic": topic, "p": partition}
        value {"offset": n, "epoch": leader epoch, "meta": str, "ts": ms, "pid": producer id or -1}
    key {"t": "group", "g": group}
        value GroupRecord as JSON (member metadata and assignments base64)

`apply_batch` folds one committed batch (data or a transaction's control batch) into
`group_offsets.OffsetsState`: the same pure function on every replica.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logquake.broker import group_offsets as go
from logquake.broker.groups import GroupRecord, MemberRecord

__all__ = ["encode_offsets", "encode_group", "apply_batch"]


def _batch(items: Iterable[tuple[dict, dict]]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    now = int(time.time() * 1000)
    for i, (key, value) in enumerate(items):
        builder.append(i, timestamp=now, key=json.dumps(key).encode(), value=json.dumps(value).encode(), headers=[])
    return bytes(builder.build())


def encode_offsets(records: Iterable[go.OffsetCommitRecord]) -> bytes:
    """One batch holding the offsets of one OffsetCommit or TxnOffsetCommit request."""
    return _batch(
        ({"t": "offset", "g": r.key.group_id, "topic": r.key.topic, "p": r.key.partition},
         {"offset": r.value.offset, "epoch": r.value.leader_epoch, "meta": r.value.metadata,
          "ts": r.value.commit_ms, "pid": r.producer_id})
        for r in records)


def encode_group(record: GroupRecord) -> bytes:
    members = [{"id": m.member_id, "client": m.client_id, "host": m.client_host, "session": m.session_timeout_ms,
                "rebalance": m.rebalance_timeout_ms, "meta": base64.b64encode(m.metadata).decode(),
                "assignment": base64.b64encode(m.assignment).decode()} for m in record.members]
    value = {"generation": record.generation, "ptype": record.protocol_type, "protocol": record.protocol_name,
             "leader": record.leader_id, "members": members}
    return _batch([({"t": "group", "g": record.group_id}, value)])


def _group(group_id: str, v: dict) -> GroupRecord:
    members = tuple(MemberRecord(member_id=m["id"], client_id=m["client"], client_host=m["host"],
                                 session_timeout_ms=m["session"], rebalance_timeout_ms=m["rebalance"],
                                 metadata=base64.b64decode(m["meta"]), assignment=base64.b64decode(m["assignment"]))
                    for m in v["members"])
    return GroupRecord(group_id=group_id, generation=v["generation"], protocol_type=v["ptype"],
                       protocol_name=v["protocol"], leader_id=v["leader"], members=members)


def apply_batch(state: go.OffsetsState, batch: bytes) -> go.OffsetsState:
    """Fold one committed batch (offsets already assigned by the leader) into the state."""
    parsed = DefaultRecordBatch(batch)
    if parsed.is_control_batch:
        for marker in parsed:
            state = go.apply_marker(state, producer_id=parsed.producer_id, commit=bool(marker.commit))
        return state
    for record in parsed:
        try:
            key, value = json.loads(record.key), json.loads(record.value)
        except (TypeError, ValueError):
            continue  # not ours: someone produced to the internal topic
        if key.get("t") == "offset":
            rec = go.OffsetCommitRecord(
                key=go.OffsetKey(key["g"], key["topic"], key["p"]),
                value=go.CommittedOffset(offset=value["offset"], leader_epoch=value["epoch"], metadata=value["meta"],
                                         commit_ms=value["ts"]),
                producer_id=value["pid"])
            state = go.apply_commit(state, rec, log_offset=record.offset)
        elif key.get("t") == "group":
            state = go.apply_group(state, _group(key["g"], value))
    return state

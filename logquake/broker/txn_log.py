"""How transaction coordinator state is written in a `__transaction_state` partition.

One JSON record per `txn.TxnMetadata` change, in ordinary v2 batches; `apply_batch` folds
a committed batch into `txn.TxnCoordinatorState`, the same pure function on every replica.

    key {"t": "txn", "id": transactional id}
    value {"pid", "epoch", "timeout", "state", "partitions": [[topic, partition], ...],
           "start", "updated", "prev_pid", "prev_epoch"}
"""

from __future__ import annotations

import json

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logquake.broker import txn

__all__ = ["encode", "apply_batch"]


def encode(meta: txn.TxnMetadata, *, timestamp_ms: int = 0) -> bytes:
    """One batch holding one metadata record."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    value = {"pid": meta.producer_id, "epoch": meta.producer_epoch, "timeout": meta.timeout_ms,
             "state": meta.state.value, "partitions": sorted([t, p] for t, p in meta.partitions),
             "start": meta.txn_start_ms, "updated": meta.last_update_ms, "prev_pid": meta.prev_producer_id,
             "prev_epoch": meta.prev_producer_epoch}
    builder.append(0, timestamp=timestamp_ms, key=json.dumps({"t": "txn", "id": meta.transactional_id}).encode(),
                   value=json.dumps(value).encode(), headers=[])
    return bytes(builder.build())


def apply_batch(state: txn.TxnCoordinatorState, batch: bytes) -> txn.TxnCoordinatorState:
    parsed = DefaultRecordBatch(batch)
    if parsed.is_control_batch:
        return state
    for record in parsed:
        try:
            key, v = json.loads(record.key), json.loads(record.value)
        except (TypeError, ValueError):
            continue
        if key.get("t") != "txn":
            continue
        meta = txn.TxnMetadata(
            transactional_id=key["id"], producer_id=v["pid"], producer_epoch=v["epoch"], timeout_ms=v["timeout"],
            state=txn.TxnState(v["state"]), partitions=frozenset(txn.TopicPartition(t, p) for t, p in v["partitions"]),
            txn_start_ms=v["start"], last_update_ms=v["updated"], prev_producer_id=v["prev_pid"],
            prev_producer_epoch=v["prev_epoch"])
        state = txn.apply(state, meta)
    return state

"""How transaction coordinator state is written in a `__transaction_state` partition.

One JSON record per `txn.TxnMetadata` change, in ordinary v2 batches; `apply_batch` folds
a committed batch into `txn.TxnCoordinatorState`, the same pure function on every replica, and
`apply_batches` folds many to the same state for what only their latest records cost.

    key {"t": "txn", "id": transactional id}
    value {"pid", "epoch", "timeout", "state", "partitions": [[topic, partition], ...],
           "start", "updated", "prev_pid", "prev_epoch"}
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from types import MappingProxyType

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import decode_varint

from logquake.broker import txn

__all__ = ["encode", "apply_batch", "apply_batches"]

# A v2 batch's attributes (int16 at byte 21) and record count (int32 at byte 57); records from 61.
_ATTRS, _COUNT, _RECORDS = struct.Struct(">h"), struct.Struct(">i"), 61
_COMPRESSION_OR_CONTROL = 0x07 | 0x20


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
        state = txn.apply(state, _meta(key, v))
    return state


def apply_batches(state: txn.TxnCoordinatorState, batches: Iterable[bytes]) -> txn.TxnCoordinatorState:
    """What `apply_batch` over `batches` in order returns, decoding only each key's last record.

    A record replaces its transactional id's metadata whole (`txn.apply`), so the last record
    of each key decides. A coordinator taking over a partition folds its whole log (80k records
    per partition after a 60-min soak, a few transactional ids): JSON-decoding every record
    and copying the state for each held the loop for seconds. Batches of one uncompressed
    record (ours, `encode`) are read in place; any other batch, or a record whose JSON does
    not decode, falls back to folding every batch with `apply_batch`, which says what it means.
    """
    batches = list(batches)
    last: dict[bytes, bytes] = {}  # raw key -> raw value of its last record
    for batch in batches:
        kv = _single_record(batch)
        if kv is None:
            return _fold_each(state, batches)
        if kv[0] is not None:
            last[kv[0]] = kv[1]
    txns = dict(state.txns)
    seen: set[str] = set()
    for raw_key, raw_value in last.items():
        try:
            key, v = json.loads(raw_key), json.loads(raw_value)
        except (TypeError, ValueError):
            return _fold_each(state, batches)
        if key.get("t") == "txn":
            if key["id"] in seen:  # one id under two spellings: which record came last is lost here
                return _fold_each(state, batches)
            seen.add(key["id"])
            txns[key["id"]] = _meta(key, v)
    return txn.TxnCoordinatorState(txns=MappingProxyType(txns)) if seen else state


def _fold_each(state: txn.TxnCoordinatorState, batches: list[bytes]) -> txn.TxnCoordinatorState:
    for batch in batches:
        state = apply_batch(state, batch)
    return state


def _single_record(batch: bytes) -> tuple[bytes | None, bytes] | None:
    """(key, value) of a batch of one uncompressed record with both ((None, b"") for a control
    batch, which folds to nothing); None for any other batch."""
    if len(batch) < _RECORDS or _COUNT.unpack_from(batch, 57)[0] != 1:
        return None
    attrs = _ATTRS.unpack_from(batch, 21)[0]
    if attrs & 0x20:
        return None, b""
    if attrs & _COMPRESSION_OR_CONTROL:
        return None
    try:
        _, pos = decode_varint(batch, _RECORDS)  # record length
        pos += 1  # record attributes
        _, pos = decode_varint(batch, pos)  # timestamp delta
        _, pos = decode_varint(batch, pos)  # offset delta
        klen, pos = decode_varint(batch, pos)
        if klen < 0:
            return None
        key, pos = bytes(batch[pos : pos + klen]), pos + klen
        vlen, pos = decode_varint(batch, pos)
        if vlen < 0:
            return None
        value = bytes(batch[pos : pos + vlen])
    except IndexError:
        return None
    return (key, value) if len(key) == klen and len(value) == vlen else None


def _meta(key: dict, v: dict) -> txn.TxnMetadata:
    return txn.TxnMetadata(
        transactional_id=key["id"], producer_id=v["pid"], producer_epoch=v["epoch"], timeout_ms=v["timeout"],
        state=txn.TxnState(v["state"]), partitions=frozenset(txn.TopicPartition(t, p) for t, p in v["partitions"]),
        txn_start_ms=v["start"], last_update_ms=v["updated"], prev_producer_id=v["prev_pid"],
        prev_producer_epoch=v["prev_epoch"])

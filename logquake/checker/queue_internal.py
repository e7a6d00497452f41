"""Order inside one op: consecutive reads or sends of a key that skip or go back (int-*)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import (
    QueueIndex,
    Txn,
    key_of,
    txn_columns,
    txn_name,
)
from logquake.checker.result import op_ref
from logquake.history import Op

SKIPPED_CAP = 16  # skipped values listed in one skip example


def classify_step(ko, i1, i2, v1, v2, k) -> tuple[str, dict] | None:
    """Classify one step between two dense indices: skip, nonmonotonic, or fine."""
    delta = i2 - i1
    if delta == 1:
        return None
    if delta > 1:
        skipped = [ko.values[j] for j in range(i1 + 1, min(i2, i1 + 1 + SKIPPED_CAP))]
        return "skip", {"key": k, "values": [v1, v2], "delta": delta, "skipped": skipped}
    return "nonmonotonic", {"key": k, "values": [v1, v2], "delta": delta}


def int_poll_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """Within one op, consecutive reads of a key skip over, or go back in, the log.

    Keys named in the op's rebalance log are exempt: a rebalance may move the position. With
    a shared consumer (`opts.shared_consumer`), a step back to a message the op's client
    marked `redelivered` is none either: the server delivered it before, and its ack wait ran
    out since. A step back to a first delivery still is: the consumer hands out new messages
    in log order.
    """
    skips, nonmono = [], []
    orders = ix.orders
    notes: dict[int, tuple[set, dict]] = {}
    for t, k, pairs in _ragged_reads(ix):
        got = notes.get(t.id)
        if got is None:
            op = t.op
            got = notes[t.id] = (_rebalanced_keys(op), _redelivered(op) if opts.shared_consumer else {})
        rebalanced, redelivered = got
        if k in rebalanced:
            continue
        again = redelivered.get(k, ())
        ko = orders[k]
        io, fi = ko.index_of_offset, ko.first_index
        prev = None
        for o, v in pairs:
            i = io.get(o) if o is not None else fi.get(v)
            if i is None:
                continue
            if prev is not None and i - prev[0] != 1 and not (i < prev[0] and o in again):
                kind, e = classify_step(ko, prev[0], i, prev[1], v, k)
                e["op"] = op_ref(t.op)
                e["explanation"] = _int_words(t, k, prev[1], v, kind, "read")
                (skips if kind == "skip" else nonmono).append(e)
            prev = (i, v)
    skips.sort(key=lambda e: -e["delta"])
    nonmono.sort(key=lambda e: e["delta"])
    return {"int-poll-skip": skips, "int-nonmonotonic-poll": nonmono}


def _ragged_reads(ix: QueueIndex) -> Iterator[tuple[Txn, Any, list]]:
    """(op, key, pairs) of each read of a key of two pairs or more that is not one
    contiguous run of the key's log, in op order then in the op's key order."""
    g = ix.groups
    txns, keys = ix.txns, g.keys
    sel = np.flatnonzero(~g.contiguous & (g.length >= 2))
    for tid, kno in zip(g.tid[sel].tolist(), g.key[sel].tolist(), strict=True):
        t = txns[tid]
        k = keys[kno]
        yield t, k, t.reads[k]


def int_send_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """Within one op, consecutive sends to a key are not adjacent in the log, or go back."""
    skips, nonmono = [], []
    txns = ix.txns
    # Only ops with two sends or more: the column says which, without asking each op
    # (a StoredTxn makes its sends' list when asked).
    for tid in np.flatnonzero(txn_columns(ix).sends >= 2).tolist():
        t = txns[tid]
        last: dict[Any, tuple] = {}
        for k, v, o in t.sends:
            ko = ix.orders.get(k)
            # Only a committed op's offsets are in the version order; else go by value.
            i = ko.index(o if t.committed else None, v) if ko is not None else None
            if ko is None or i is None:
                last.pop(k, None)
                continue
            prev = last.get(k)
            if prev is not None and i - prev[0] != 1:
                kind, e = classify_step(ko, prev[0], i, prev[1], v, k)
                e["op"] = op_ref(t.op)
                e["explanation"] = _int_words(t, k, prev[1], v, kind, "sent")
                (skips if kind == "skip" else nonmono).append(e)
            last[k] = (i, v)
    skips.sort(key=lambda e: -e["delta"])
    nonmono.sort(key=lambda e: e["delta"])
    return {"int-send-skip": skips, "int-nonmonotonic-send": nonmono}


def _int_words(t: Txn, k, v1, v2, kind: str, verb: str) -> str:
    how = "skipping over values between them" if kind == "skip" else "going backwards in the log"
    return f"{txn_name(t)} {verb} {v1} then {v2} of key {k}, {how}"


def _redelivered(op: Op) -> dict[Any, set]:
    """Per key, the offsets a shared consumer delivered again in this op (its `redelivered`)."""
    marks = op.get("redelivered")
    if not isinstance(marks, dict):
        return {}
    return {key_of(k): {o for o in offsets if isinstance(o, int)} for k, offsets in marks.items()
            if isinstance(offsets, list)}


def _rebalanced_keys(op: Op) -> set:
    log = op.get("rebalance_log") or op.get("rebalance-log") or ()
    return {key_of(k) for event in log if isinstance(event, dict) for k in event.get("keys", ())}

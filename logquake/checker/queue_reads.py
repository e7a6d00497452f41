"""Reads of values that should not be visible: G1a (a failed op's send) and precommitted reads."""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import (
    QueueIndex,
    txn_columns,
    txn_name,
)
from logquake.checker.result import op_ref
from logquake.history import OK

_second = itemgetter(1)


def g1a_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """An ok op read a value that a failed op sent (an aborted read).

    Only `fail` writers count: an info writer may have committed, so reading its value is
    no anomaly.
    """
    errs = []
    failed = ix.failed_writes
    # Which keys have an aborted read at all: one set intersection per key, in C.
    keys = {k for k, fk in failed.items() if not fk.isdisjoint(ix.reads_ok.get(k, ()))}
    if not keys:
        return {}
    for t in ix.txns:
        if t.type != OK:
            continue
        for k, pairs in t.reads.items():
            if k not in keys:
                continue
            fk = failed[k]
            for _, v in pairs:
                if v in fk:
                    w = ix.writer(k, v)
                    errs.append(
                        {
                            "key": k,
                            "value": v,
                            "writer": op_ref(w.op),
                            "reader": op_ref(t.op),
                            "explanation": f"{txn_name(t)} read {v} from key {k}, but {txn_name(w)} "
                            f"that sent it failed",
                        }
                    )
    return {"G1a": errs}


def precommitted_read_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """An op read a value it sent itself, before its transaction could have committed."""
    errs = []
    txns = ix.txns
    # Only ops that both send and read, as the columns and read groups say, without asking
    # each op (a StoredTxn makes its sends and reads when asked).
    read_some = np.bincount(ix.groups.tid, minlength=len(txns)) > 0
    for tid in np.flatnonzero((txn_columns(ix).sends > 0) & read_some).tolist():
        t = txns[tid]
        for k, v, _ in t.sends:
            pairs = t.reads.get(k)
            if pairs and v in map(_second, pairs):  # (a C loop, not a generator)
                errs.append(
                    {
                        "key": k,
                        "value": v,
                        "op": op_ref(t.op),
                        "explanation": f"{txn_name(t)} sent {v} to key {k} and polled it back "
                        f"within the same transaction",
                    }
                )
    return {"precommitted-read": errs}

"""Order across the ops of one process: poll-skip, nonmonotonic-poll, nonmonotonic-send."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
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
from logquake.checker.queue_internal import classify_step
from logquake.checker.result import op_ref
from logquake.history import Op


def process_order_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """A process's next poll of a key skips or goes back; its next send goes back.

    Polls: the first value an op reads of a key is compared with the last value the
    process's previous ok op read of it. An assign or subscribe keeps only the keys still
    assigned; with seek_to_beginning it forgets them all (the position was reset on
    purpose). Sends: the first value an ok/info op sends to a key is compared with the
    last one the process sent to it before.
    """
    skips: list = []
    nm_polls: list = []
    _poll_order(ix, skips, nm_polls)
    nm_sends = _send_order(ix)
    skips.sort(key=lambda e: -e["delta"])
    nm_polls.sort(key=lambda e: e["delta"])
    nm_sends.sort(key=lambda e: e["delta"])
    return {"poll-skip": skips, "nonmonotonic-poll": nm_polls, "nonmonotonic-send": nm_sends}


def _poll_step(
    ix: QueueIndex, a: Txn, b: Txn, k, i0: int, i1: int, v0, v1, skips: list, nm_polls: list
) -> None:
    kind, e = classify_step(ix.orders[k], i0, i1, v0, v1, k)
    e["ops"] = [op_ref(a.op), op_ref(b.op)]
    e["explanation"] = _proc_words(b.process, a, b, k, v0, v1, kind, "read")
    (skips if kind == "skip" else nm_polls).append(e)


def _poll_order(ix: QueueIndex, skips: list, nm_polls: list) -> None:
    """Polls, as segment operations over the read groups.

    Sorted by (process, key) with op order kept, each group's predecessor is the last
    earlier group of its segment that an ok op made (only ok polls move a position). Only
    the pairs that are not one step apart, anomalies or not, are then looked at one by one:
    an assign or subscribe between them that dropped the key makes them no pair.
    """
    g = ix.groups
    txns = ix.txns
    sel = np.flatnonzero(g.some)  # an empty read neither compares nor moves a position
    if not len(sel):
        return
    cols = txn_columns(ix)
    proc, ok_t = cols.process, cols.ok
    seg = proc[g.tid[sel]] * max(len(g.keys), 1) + g.key[sel]
    order = np.argsort(seg, kind="stable")
    s, seg = sel[order], seg[order]
    n = len(s)
    at = np.arange(n)
    seg_start = np.zeros(n, dtype=np.int64)
    seg_start[1:] = np.where(seg[1:] != seg[:-1], at[1:], 0)
    np.maximum.accumulate(seg_start, out=seg_start)
    last_ok = np.maximum.accumulate(np.where(ok_t[g.tid[s]], at, -1))
    prev = np.full(n, -1, dtype=np.int64)
    prev[1:] = last_ok[:-1]
    j = np.flatnonzero(prev >= seg_start)
    cur, before = s[j], s[prev[j]]
    off = g.first[cur] - g.last[before] != 1
    cur, before = cur[off], before[off]
    o = np.argsort(cur)  # back to op order, the order the examples are listed in
    cur, before = cur[o], before[o]
    subs = _subs_by_process(ix)
    keys = g.keys
    for kno, tc, tp, i1, i0 in zip(
        g.key[cur].tolist(),
        g.tid[cur].tolist(),
        g.tid[before].tolist(),
        g.first[cur].tolist(),
        g.last[before].tolist(),
        strict=True,
    ):
        b, a, k = txns[tc], txns[tp], keys[kno]
        if _dropped(subs.get(b.process), tp, tc, k):
            continue
        _poll_step(ix, a, b, k, i0, i1, a.reads[k][-1][1], b.reads[k][0][1], skips, nm_polls)


def _subs_by_process(ix: QueueIndex) -> dict[Any, tuple[list[int], list[Op]]]:
    """process -> (number of Txns before each of its assign/subscribe ops, the ops)."""
    out: dict[Any, tuple[list, list]] = {}
    for before, op in ix.subs:
        got = out.get(op.process)
        if got is None:
            out[op.process] = got = ([], [])
        got[0].append(before)
        got[1].append(op)
    return out


def _dropped(subs: tuple[list[int], list[Op]] | None, a: int, b: int, k: Any) -> bool:
    """Did an assign/subscribe of the process between ops a and b (ids) drop key k?"""
    if subs is None:
        return False
    befores, ops = subs
    for x in range(bisect_left(befores, a + 1), bisect_right(befores, b)):
        ev = ops[x]
        if ev.get("seek_to_beginning") or k not in {key_of(y) for y in (ev.value or ())}:
            return True
    return False


def _send_order(ix: QueueIndex) -> list:
    """nonmonotonic-send: every send of an ok or info op placed per key as arrays (by offset when its op committed, else by value), then per (process, key) in
    op order each op's first send to the key against the last placed send before it."""
    g = ix.groups
    cols = txn_columns(ix)
    i64 = np.int64
    parts: list[tuple] = []  # (op ids, ranks, key no, values, dense indices)
    keys = list(g.sends.keys() | g.bare_sends.keys())
    empty = np.zeros(0, dtype=i64)
    for kno, k in enumerate(keys):
        so, sv, st, sr = g.sends.get(k, (empty, empty, empty, empty))
        bv, bt, br = g.bare_sends.get(k, (empty, empty, empty))
        tids, ranks = np.concatenate((st, bt)), np.concatenate((sr, br))
        vals = np.concatenate((sv, bv))
        offs = np.concatenate((so, np.full(len(bv), -1, dtype=i64)))  # -1: none
        ko = ix.orders.get(k)
        dense = np.full(len(tids), -1, dtype=i64)
        log = g.logs.get(k)
        if ko is None:
            pass  # never in a version order: no send of it is placed
        elif log is None:  # an offset holds two values: ask the KeyOrder
            com = g.committed[tids].tolist()
            dense[:] = [
                -1 if i is None else i
                for i in (
                    ko.index(o if c and o >= 0 else None, v)
                    for o, v, c in zip(offs.tolist(), vals.tolist(), com, strict=True)
                )
            ]
        elif len(log[0]):
            uo, lv = log
            by_off = g.committed[tids] & (offs >= 0)
            at = np.minimum(np.searchsorted(uo, offs), len(uo) - 1)
            found = by_off & (uo[at] == offs)
            dense[found] = at[found]
            # by value: the first index holding it (no offset holds two values here)
            vo = np.argsort(lv, kind="stable")
            sorted_v = lv[vo]
            rest = np.flatnonzero(~found)
            at = np.minimum(np.searchsorted(sorted_v, vals[rest]), len(sorted_v) - 1)
            hit = sorted_v[at] == vals[rest]
            dense[rest[hit]] = vo[at[hit]]
        parts.append((tids, ranks, np.full(len(tids), kno, dtype=i64), vals, dense))
    if not parts:
        return []
    T, R, K, V, D = (np.concatenate(x) for x in zip(*parts, strict=True))
    n = len(ix.txns)
    order = np.lexsort((R, T, K, cols.process[T]))  # per (process, key), in op then send order
    T, R, K, V, D = T[order], R[order], K[order], V[order], D[order]
    m = len(T)
    at = np.arange(m)
    seg = cols.process[T] * (len(keys) + 1) + K
    seg_start = np.zeros(m, dtype=i64)
    seg_start[1:] = np.where(seg[1:] != seg[:-1], at[1:], 0)
    np.maximum.accumulate(seg_start, out=seg_start)
    first = np.ones(m, dtype=bool)  # the op's first send to the key
    first[1:] = (seg[1:] != seg[:-1]) | (T[1:] != T[:-1])
    placed = np.maximum.accumulate(np.where(D >= 0, at, -1))
    prev = np.full(m, -1, dtype=i64)
    prev[1:] = placed[:-1]
    j = np.flatnonzero(first & (D >= 0) & (prev >= seg_start))
    j = j[D[j] - D[prev[j]] < 1]
    j = j[np.lexsort((R[j], T[j]))]  # the order the loop meets them in
    del n
    out = []
    txns = ix.txns
    for c, pc in zip(j.tolist(), prev[j].tolist(), strict=True):
        k = keys[int(K[c])]
        a, b = txns[int(T[pc])], txns[int(T[c])]
        v0, v1 = int(V[pc]), int(V[c])
        _, e = classify_step(ix.orders[k], int(D[pc]), int(D[c]), v0, v1, k)
        e["ops"] = [op_ref(a.op), op_ref(b.op)]
        e["explanation"] = _proc_words(b.process, a, b, k, v0, v1, "nonmonotonic", "sent")
        out.append(e)
    return out


def _proc_words(p, a: Txn, b: Txn, k, v1, v2, kind: str, verb: str) -> str:
    how = "skipping over values between them" if kind == "skip" else "going backwards in the log"
    return f"process {p} {verb} {v1} of key {k} in {txn_name(a)}, then {v2} in its next {txn_name(b)}, {how}"

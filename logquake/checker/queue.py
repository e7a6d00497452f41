"""The queue analysis: Jepsen's Kafka checker (jepsen.tests.kafka), for logquake histories.

`check_history(ops, opts)` indexes the history once (queue_index.py), then runs one
`*_cases(ix, opts)` function per anomaly family; each returns examples (dicts naming the
ops involved by index, process and time). Cycle anomalies come from cycles.py. Every
analysis runs under `run_safely`, so one that crashes makes the verdict unknown rather
than hiding the others. Pure: no I/O, no clock but the cycle search's time budget.

Where this departs from jepsen.tests.kafka, and why:
- Reads are placed in the version order by their offset (dense index of the offset), not
  by their value, so a duplicated value does not also show up as skips and reversals.
- An assign with seek_to_beginning forgets the process's positions: the rewind is asked for.
- nonmonotonic-send is not reset by assign/subscribe: a producer's order has nothing to
  do with what its consumer is assigned.
- A value in the log that no op sent is skipped by lost-write (Jepsen throws).
- Failed ops are not nodes of the dependency graph (they did not happen; reading their
  writes is G1a).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import Any

import numpy as np

from logquake.checker import final_read
from logquake.checker.cycles import cycle_cases
from logquake.checker.options import QUEUE_TYPES, CheckOptions, allowed_types
from logquake.checker.queue_index import (
    CONTIGUOUS,
    FIRST,
    LAST,
    QueueIndex,
    Txn,
    build_index,
    key_of,
    txn_columns,
)
from logquake.checker.result import anomaly_entry, op_ref, run_safely, verdict
from logquake.gcpause import paused_gc
from logquake.history import FAIL, INFO, OK, Op

SKIPPED_CAP = 16  # skipped values listed in one skip example
UNSEEN_VALUES_CAP = 32
UNSEEN_POINTS = 200
_first, _second = itemgetter(0), itemgetter(1)


def check_history(ops: Iterable[Op], opts: CheckOptions | None = None) -> dict[str, Any]:
    """Analyse a queue history; the results.json object of DESIGN.md §8."""
    opts = opts or CheckOptions()
    # The analyses allocate millions of small containers while the history keeps millions
    # more alive; the cyclic GC would rescan them all again and again (it tripled the time).
    # Nothing here makes reference cycles, so it is paused for the duration.
    with paused_gc():
        return _check(ops, opts)


def _check(ops: Iterable[Op], opts: CheckOptions) -> dict[str, Any]:
    errors: dict[str, str] = {}
    ops = ops if isinstance(ops, list) else list(ops)
    ix = run_safely("index", lambda: build_index(ops), errors)
    if ix is None:
        return _assemble({}, {}, opts, errors, timed_out=False, nothing=True, ix=None)
    found: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int] = {}
    for name, fn in _CASES:
        got = run_safely(name, lambda fn=fn: fn(ix, opts), errors)
        for typ, errs in (got or {}).items():
            if errs:
                found.setdefault(typ, []).extend(errs)
    unseen = run_safely("unseen", lambda: unseen_analysis(ix), errors)
    if unseen and unseen["count"]:
        found["unseen"] = unseen["errs"]
        counts["unseen"] = unseen["count"]
    final = run_safely("final-read", lambda: final_read.analyse(ops), errors)
    if final is not None and final.cases:
        found[final_read.LOST] = final.cases
    cyc = run_safely("cycles", lambda: cycle_cases(ix, opts), errors)
    timed_out = False
    if cyc is not None:
        timed_out = cyc.timed_out
        found.update({t: e for t, e in cyc.cases.items() if e})
        counts.update({t: n for t, n in cyc.counts.items() if n})
    info = {
        "worst_realtime_lag": run_safely("realtime-lag", lambda: worst_realtime_lag(ix), errors),
        "unseen_over_time": unseen["over_time"] if unseen else [],
        "info_txn_causes": run_safely("info-causes", lambda: info_causes(ix), errors),
        "cycle_search": cyc.stats if cyc is not None else None,
    }
    nothing = not ix.txns
    result = _assemble(found, counts, opts, errors, timed_out=timed_out, nothing=nothing, ix=ix)
    result.update(info)
    return final_read.judge(result, final)


def _assemble(found, counts, opts, errors, *, timed_out, nothing, ix) -> dict[str, Any]:
    order = {t: i for i, t in enumerate(QUEUE_TYPES)}
    anomalies = {
        t: anomaly_entry(found[t], count=counts.get(t), cap=opts.max_examples)
        for t in sorted(found, key=lambda t: order.get(t, len(order)))
    }
    out = verdict(
        anomalies, final_read.tolerate(allowed_types(opts)), analysis_errors=errors, timed_out=timed_out, nothing_checked=nothing
    )
    out["anomalies"] = anomalies
    if errors:
        out["analysis_errors"] = errors
    if timed_out:
        out["unknown_because"] = "the cycle search ran out of its time budget"
    elif errors:  # (before "nothing": a failed index leaves nothing to check too)
        out["unknown_because"] = "an analysis failed: " + ", ".join(sorted(errors))
    elif nothing:
        out["unknown_because"] = "the history holds no send, poll or txn ops to check"
    out["options"] = {
        "sub_via": opts.sub_via,
        "txn": opts.txn,
        "ww_deps": opts.ww_deps,
        "ignore": list(opts.ignore),
        "guarantee": opts.guarantee,
    }
    out["stats"] = {
        "client_ops": ix.client_ops if ix else 0,
        "txns": len(ix.txns) if ix else 0,
        "keys": len(ix.orders) if ix else 0,
    }
    return out


# --- per-key log anomalies -------------------------------------------------------------


def inconsistent_offset_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """One offset of a key holds two different values."""
    errs = []
    for k, ko in ix.orders.items():
        for o, vs in sorted(ko.conflicts.items()):
            errs.append(
                {
                    "key": k,
                    "offset": o,
                    "index": ko.index_of_offset[o],
                    "values": list(vs),
                    "explanation": f"offset {o} of key {k} was seen holding each of {list(vs)}",
                }
            )
    return {"inconsistent-offsets": errs}


def duplicate_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """One value at more than one offset of a key."""
    errs = []
    for k, ko in ix.orders.items():
        for v, offs in ko.dups.items():
            errs.append(
                {
                    "key": k,
                    "value": v,
                    "count": len(offs),
                    "offsets": offs,
                    "explanation": f"value {v} of key {k} appears at {len(offs)} offsets: {offs}",
                }
            )
    errs.sort(key=lambda e: -e["count"])
    return {"duplicate": errs}


def lost_write_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """A committed value below the highest index an ok op read was never read by an ok op.

    The bound is, per key, the highest first-appearance index of any value an ok op read;
    every value whose last appearance is at or below it should have been read too. Only
    values whose writer must have committed count (a torn transaction shows up here: an
    info txn one of whose sends was read commits all of them).
    """
    errs = []
    wanted: dict[tuple, dict] = {}
    for k, read in ix.reads_ok.items():
        ko = ix.orders.get(k)
        if ko is None:
            continue
        first, last = ko.first_index, ko.last_index
        bound = max((first[v] for v in read if v in first), default=-1)
        for i in range(bound + 1):
            for v in ko.values_at(i):
                if v in read or last.get(v, first[v]) > bound:
                    continue
                w = ix.writer(k, v)
                if w is None or not w.committed:
                    continue
                vmax = ko.values[bound]
                e = {
                    "key": k,
                    "value": v,
                    "index": first[v],
                    "offset": ko.offsets[first[v]],
                    "max_read_index": bound,
                    "max_read_value": vmax,
                    "writer": op_ref(w.op),
                    "max_read": None,
                    "explanation": f"{_name(w)} sent {v} to key {k} (index {first[v]}), and ok "
                    f"ops read key {k} up to index {bound} (value {vmax}), yet "
                    f"no ok op ever read {v}",
                }
                errs.append(e)
                wanted.setdefault((k, vmax), e)
    if wanted:
        _fill_max_readers(ix, wanted, errs)
    return {"lost-write": errs}


def _fill_max_readers(ix: QueueIndex, wanted: dict[tuple, dict], errs: list[dict]) -> None:
    """Name the first ok op that read the highest value, as proof the key was read that far."""
    for e in errs:
        tid = ix.reads_ok[e["key"]].get(e["max_read_value"])
        e["max_read"] = op_ref(ix.txns[tid].op) if tid is not None else None


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
                            "explanation": f"{_name(t)} read {v} from key {k}, but {_name(w)} "
                            f"that sent it failed",
                        }
                    )
    return {"G1a": errs}


def precommitted_read_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """An op read a value it sent itself, before its transaction could have committed."""
    errs = []
    for t in ix.txns:
        if not t.sends or not t.reads:
            continue
        for k, v, _ in t.sends:
            pairs = t.reads.get(k)
            if pairs and v in map(_second, pairs):  # (a C loop, not a generator)
                errs.append(
                    {
                        "key": k,
                        "value": v,
                        "op": op_ref(t.op),
                        "explanation": f"{_name(t)} sent {v} to key {k} and polled it back "
                        f"within the same transaction",
                    }
                )
    return {"precommitted-read": errs}


# --- order inside one op ----------------------------------------------------------------


def _step(ko, i1, i2, v1, v2, k) -> tuple[str, dict] | None:
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

    Keys named in the op's rebalance log are exempt: a rebalance may move the position.
    """
    skips, nonmono = [], []
    orders = ix.orders
    rebalanced: dict[int, set] = {}
    for t, k, pairs in _ragged_reads(ix):
        got = rebalanced.get(t.id)
        if got is None:
            got = rebalanced[t.id] = _rebalanced_keys(t.op)
        if k in got:
            continue
        ko = orders[k]
        io, fi = ko.index_of_offset, ko.first_index
        prev = None
        for o, v in pairs:
            i = io.get(o) if o is not None else fi.get(v)
            if i is None:
                continue
            if prev is not None and i - prev[0] != 1:
                kind, e = _step(ko, prev[0], i, prev[1], v, k)
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
    if g is not None:  # the numpy index: one array expression
        txns, keys = ix.txns, g.keys
        sel = np.flatnonzero(~g.contiguous & (g.length >= 2))
        for tid, kno in zip(g.tid[sel].tolist(), g.key[sel].tolist(), strict=True):
            t = txns[tid]
            k = keys[kno]
            yield t, k, t.reads[k]
        return
    for t in ix.txns:
        if not t.reads:
            continue
        for (k, pairs), pos in zip(t.reads.items(), t.pos, strict=True):
            if not pos[CONTIGUOUS] and len(pairs) >= 2:
                yield t, k, pairs


def int_send_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """Within one op, consecutive sends to a key are not adjacent in the log, or go back."""
    skips, nonmono = [], []
    for t in ix.txns:
        if len(t.sends) < 2:
            continue
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
                kind, e = _step(ko, prev[0], i, prev[1], v, k)
                e["op"] = op_ref(t.op)
                e["explanation"] = _int_words(t, k, prev[1], v, kind, "sent")
                (skips if kind == "skip" else nonmono).append(e)
            last[k] = (i, v)
    skips.sort(key=lambda e: -e["delta"])
    nonmono.sort(key=lambda e: e["delta"])
    return {"int-send-skip": skips, "int-nonmonotonic-send": nonmono}


def _int_words(t: Txn, k, v1, v2, kind: str, verb: str) -> str:
    how = "skipping over values between them" if kind == "skip" else "going backwards in the log"
    return f"{_name(t)} {verb} {v1} then {v2} of key {k}, {how}"


def _rebalanced_keys(op: Op) -> set:
    log = op.get("rebalance_log") or op.get("rebalance-log") or ()
    return {key_of(k) for event in log if isinstance(event, dict) for k in event.get("keys", ())}


# --- order across the ops of one process -------------------------------------------------


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
    if ix.groups is not None:
        _poll_order_arrays(ix, skips, nm_polls)
    else:
        _poll_order(ix, skips, nm_polls)
    nm_sends = _send_order_arrays(ix) if ix.groups is not None and ix.groups.bare_sends is not None else None
    if nm_sends is None:
        nm_sends = _send_order(ix)
    skips.sort(key=lambda e: -e["delta"])
    nm_polls.sort(key=lambda e: e["delta"])
    nm_sends.sort(key=lambda e: e["delta"])
    return {"poll-skip": skips, "nonmonotonic-poll": nm_polls, "nonmonotonic-send": nm_sends}


def _poll_order(ix: QueueIndex, skips: list, nm_polls: list) -> None:
    """Polls, op by op through Txn.pos (the general index)."""
    last_reads: dict[Any, dict] = {}
    orders = ix.orders
    for ev in ix.events:
        if isinstance(ev, Op):  # assign / subscribe
            lr = last_reads.get(ev.process)
            if lr:
                keep = set() if ev.get("seek_to_beginning") else {key_of(k) for k in (ev.value or ())}
                last_reads[ev.process] = {k: x for k, x in lr.items() if k in keep}
            continue
        t: Txn = ev
        if not t.reads:
            continue
        p = t.process
        lr = last_reads.setdefault(p, {})
        ok = t.type == OK
        for (k, pairs), pos in zip(t.reads.items(), t.pos, strict=True):
            prev = lr.get(k)
            if prev is not None:
                i0 = pos[FIRST]
                if i0 is None:
                    first = _first_index(orders[k], pairs)
                else:  # the value is looked up only for an anomaly: the pairs are cold memory
                    first = (i0, None) if i0 - prev[0] == 1 else (i0, pairs[0][1])
                if first is not None and first[0] - prev[0] != 1:
                    v0 = prev[1] if prev[3] is None else prev[3][-1][1]
                    _poll_step(ix, prev[2], t, k, prev[0], first[0], v0, first[1], skips, nm_polls)
            if ok:
                i1 = pos[LAST]
                if i1 is not None:  # (index, value, op, pairs whose last holds the value)
                    lr[k] = (i1, None, t, pairs)
                else:
                    last = _last_index(orders[k], pairs)
                    if last is not None:
                        lr[k] = (last[0], last[1], t, None)


def _poll_step(
    ix: QueueIndex, a: Txn, b: Txn, k, i0: int, i1: int, v0, v1, skips: list, nm_polls: list
) -> None:
    kind, e = _step(ix.orders[k], i0, i1, v0, v1, k)
    e["ops"] = [op_ref(a.op), op_ref(b.op)]
    e["explanation"] = _proc_words(b.process, a, b, k, v0, v1, kind, "read")
    (skips if kind == "skip" else nm_polls).append(e)


def _poll_order_arrays(ix: QueueIndex, skips: list, nm_polls: list) -> None:
    """_poll_order on the numpy index, as segment operations over the read groups.

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


def _send_order_arrays(ix: QueueIndex) -> list:
    """_send_order on the numpy index: every send of an ok or info op placed per key as
    arrays (by offset when its op committed, else by value), then per (process, key) in
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
        _, e = _step(ix.orders[k], int(D[pc]), int(D[c]), v0, v1, k)
        e["ops"] = [op_ref(a.op), op_ref(b.op)]
        e["explanation"] = _proc_words(b.process, a, b, k, v0, v1, "nonmonotonic", "sent")
        out.append(e)
    return out


def _send_order(ix: QueueIndex) -> list:
    """nonmonotonic-send: the first value an ok/info op sends to a key vs the process's last."""
    nm_sends = []
    last_sends: dict[Any, dict] = {}
    orders = ix.orders
    for t in ix.txns:
        if not t.sends or t.type == FAIL:
            continue
        p = t.process
        ls = last_sends.setdefault(p, {})
        seen: set = set()
        for k, v, o in t.sends:
            ko = orders.get(k)
            i = ko.index(o if t.committed else None, v) if ko is not None else None
            if k not in seen:
                seen.add(k)
                prev = ls.get(k)
                if prev is not None and i is not None and i - prev[0] < 1:
                    _, e = _step(ko, prev[0], i, prev[1], v, k)
                    e["ops"] = [op_ref(prev[2].op), op_ref(t.op)]
                    e["explanation"] = _proc_words(p, prev[2], t, k, prev[1], v, "nonmonotonic", "sent")
                    nm_sends.append(e)
            if i is not None:
                ls[k] = (i, v, t)
    return nm_sends


def _first_index(ko, pairs) -> tuple | None:
    for o, v in pairs:
        i = ko.index(o, v)
        if i is not None:
            return i, v
    return None


def _last_index(ko, pairs) -> tuple | None:
    for o, v in reversed(pairs):
        i = ko.index(o, v)
        if i is not None:
            return i, v
    return None


def _proc_words(p, a: Txn, b: Txn, k, v1, v2, kind: str, verb: str) -> str:
    how = "skipping over values between them" if kind == "skip" else "going backwards in the log"
    return f"process {p} {verb} {v1} of key {k} in {_name(a)}, then {v2} in its next {_name(b)}, {how}"


# --- unseen, lag, causes ----------------------------------------------------------------


def unseen_analysis(ix: QueueIndex) -> dict[str, Any]:
    """Values ok ops sent that no ok op has polled, over time and at the end.

    A value is unseen from the first ok op that sent it until the first ok op that
    polled it, unless that poll came first; the index knows each value's first ok
    reader, so only the sends are walked here, never the reads.
    """
    if ix.groups is not None and ix.groups.ok_sends_placed:
        return _unseen_arrays(ix)
    first_read = ix.reads_ok
    delta: dict[int, int] = {}  # op id -> change of the unseen count there
    unseen: dict[Any, list] = {}
    done: dict[Any, set] = {}  # key -> values already counted
    nobody: dict = {}
    for t in ix.txns:
        if t.type != OK or not t.sends:
            continue
        tid = t.id
        for k, v, _ in t.sends:
            dk = done.get(k)
            if dk is None:
                done[k] = dk = set()
            elif v in dk:
                continue
            dk.add(v)
            r = first_read.get(k, nobody).get(v)
            if r is None:
                unseen.setdefault(k, []).append(v)
            elif r < tid:
                continue  # polled before it was acknowledged: never unseen
            else:
                delta[r] = delta.get(r, 0) - 1
            delta[tid] = delta.get(tid, 0) + 1
    total = 0
    points: list[tuple[int, int]] = []
    for tid in sorted(delta):
        if delta[tid]:
            total += delta[tid]
            points.append((ix.txns[tid].op.time, total))
    return _unseen_result(unseen, total, points)


def _unseen_arrays(ix: QueueIndex) -> dict[str, Any]:
    """unseen_analysis from the numpy index's per-key sends and first readers.

    Per key, each value's first ok send (sends are kept in op order), looked up among the
    values ok ops read (sorted); the count changes +1 at that send and -1 at the first
    read, unless the read came first.
    """
    g = ix.groups
    cols = txn_columns(ix)
    n = len(ix.txns)
    unseen: dict[Any, list] = {}
    plus, minus = [], []
    for k, (_, vals, tids, _) in g.sends.items():
        m = cols.ok[tids]
        if not m.any():
            continue
        v, t = vals[m], tids[m]
        order = np.argsort(v, kind="stable")
        v, t = v[order], t[order]
        first = np.ones(len(v), dtype=bool)
        first[1:] = v[1:] != v[:-1]
        v, t = v[first], t[first]
        r = np.full(len(v), -1, dtype=np.int64)
        fr = g.first_reader.get(k)
        if fr is not None and len(fr[0]):
            at = np.minimum(np.searchsorted(fr[0], v), len(fr[0]) - 1)
            hit = fr[0][at] == v
            r[hit] = fr[1][at[hit]]
        never = r < 0
        if never.any():
            unseen[k] = v[never].tolist()
        counted = never | (r >= t)
        plus.append(t[counted])
        minus.append(r[counted & ~never])
    delta = np.zeros(n, dtype=np.int64)
    if plus:
        delta = np.bincount(np.concatenate(plus), minlength=n) - np.bincount(
            np.concatenate(minus), minlength=n
        )
    at = np.flatnonzero(delta)
    totals = np.cumsum(delta[at])
    points = list(zip(cols.time[at].tolist(), totals.tolist(), strict=True))
    return _unseen_result(unseen, int(totals[-1]) if len(totals) else 0, points)


def _unseen_result(unseen: dict[Any, list], total: int, points: list[tuple[int, int]]) -> dict[str, Any]:
    errs = []
    for k in sorted(unseen, key=str):
        vs = unseen[k]
        errs.append(
            {
                "key": k,
                "count": len(vs),
                "values": sorted(vs, key=str)[:UNSEEN_VALUES_CAP],
                "explanation": f"{len(vs)} acknowledged values of key {k} were never polled",
            }
        )
    return {"count": total, "errs": errs, "over_time": _downsample(points)}


def _downsample(points: list[tuple[int, int]]) -> list[dict[str, float]]:
    """At most UNSEEN_POINTS points, keeping the last and the peak."""
    if len(points) > UNSEEN_POINTS:
        step = len(points) / UNSEEN_POINTS
        keep = {int(i * step) for i in range(UNSEEN_POINTS)} | {len(points) - 1}
        peak = max(range(len(points)), key=lambda i: points[i][1])
        keep.add(peak)
        points = [points[i] for i in sorted(keep)]
    return [{"time": t / 1e9, "unseen": n} for t, n in points]


def worst_realtime_lag(ix: QueueIndex) -> dict[str, Any]:
    """The poll furthest behind the log, as Jepsen measures it (a lower bound).

    expired[k][i] is when offset i-1 of key k was known to be no longer the tail (some op
    had sent or polled a later offset). A poll at time t whose process has read key k up
    to offset o lags by t - expired[k][o+1]. For each process and key the lag only grows
    while its offset stays put, so it is evaluated once per run of one offset, at the last
    poll of that run. Ties go to the run closed first.
    """
    if ix.groups is not None:
        return _realtime_lag_arrays(ix)
    expired: defaultdict[Any, list[int]] = defaultdict(list)
    for t in ix.txns:
        if t.type == FAIL:
            continue
        # Reads and sends one after the other: extending to each is extending to their max.
        for k, o in t.max_read.items():
            lst = expired[k]
            if len(lst) <= o:
                lst.extend([t.op.time] * (o + 1 - len(lst)))
        for k, _, o in t.sends:
            if o is not None and o >= 0:
                lst = expired[k]
                if len(lst) <= o:
                    lst.extend([t.op.time] * (o + 1 - len(lst)))
    best = [0, 0, None, None]  # lag ns, poll time ns, process, key
    state: dict[Any, dict] = {}  # process -> key -> (offset, seq of the run's first poll)
    seq: dict[Any, int] = {}  # process -> polls so far
    last_poll: dict[Any, int] = {}  # process -> invoke time of its latest poll

    def close(p: Any, k: Any, o: int, first: int, upto: int) -> None:
        """A run of offset o ends; its lag peaked at poll `upto` (if the run had polls)."""
        if upto < first:
            return
        lst = expired.get(k, ())
        if o + 1 < len(lst):
            t = last_poll[p]
            lag = t - lst[o + 1]
            if lag > best[0]:
                best[:] = [lag, t, p, k]

    for ev in ix.events:
        if isinstance(ev, Op):
            if ev.type != OK:
                continue
            p = ev.process
            runs = state.setdefault(p, {})
            keep = {key_of(k) for k in (ev.value or ())} if ev.f == "assign" else set()
            done = seq.get(p, 0)
            for k in list(runs):
                if k not in keep:
                    o, first = runs.pop(k)
                    close(p, k, o, first, done)
            for k in keep:
                runs.setdefault(k, (-1, done + 1))
            continue
        t: Txn = ev
        if t.type != OK or t.op.f == "send":
            continue
        p = t.process
        runs = state.get(p)
        if runs is None:
            state[p] = runs = {}
        s = seq[p] = seq.get(p, 0) + 1
        for k, o in _max_offsets(t).items():
            run = runs.get(k)
            if run is None:
                runs[k] = (o, s)
            elif o > run[0]:
                if s - 1 >= run[1]:  # close(p, k, *run, s - 1), inlined: the hot path
                    lst = expired.get(k, ())
                    if run[0] + 1 < len(lst):
                        lag = last_poll[p] - lst[run[0] + 1]
                        if lag > best[0]:
                            best[:] = [lag, last_poll[p], p, k]
                runs[k] = (o, s)
        last_poll[p] = t.inv_time
    for p, runs in state.items():
        for k, (o, first) in runs.items():
            close(p, k, o, first, seq.get(p, 0))
    lag, t, p, k = best
    return {"time": t / 1e9, "lag": lag / 1e9, "process": p, "key": k}


def _realtime_lag_arrays(ix: QueueIndex) -> dict[str, Any]:
    """worst_realtime_lag on the numpy index: the same runs, closed in the same order.

    Each ok poll or txn is a step of its process (seq 1, 2, ...); per (process, key) the
    highest offset it read or sent at a step, `mo`, forms runs of the running maximum,
    and each run closes when that maximum rises (lag measured at the step before), when
    an assign/subscribe drops the key, or at the end. Between two assign/subscribe ops of
    a process (an epoch) nothing resets a run, so the closes inside such a block are
    array operations; only each block's first step and the assign/subscribe ops are
    walked in Python. Every close is kept with where the loop of worst_realtime_lag
    would have made it, so equal lags pick the same one.
    """
    g = ix.groups
    txns = ix.txns
    n = len(txns)
    i64 = np.int64
    cols = txn_columns(ix)
    fail, poll, op_time, inv_time, proc = cols.fail, cols.step, cols.time, cols.inv_time, cols.process
    # Every (op, key, offset, rank in _max_offsets' order): each read group's highest
    # offset (its rank: its place among the op's reads), each send with an offset (its rank:
    # after all reads, in send order).
    keys = list(g.keys)
    key_no = {k: i for i, k in enumerate(keys)}
    rs = np.flatnonzero(g.some)
    tid_parts, key_parts, off_parts, rank_parts = [g.tid[rs]], [g.key[rs]], [g.max[rs]], []
    rank_parts.append(rs - np.searchsorted(g.tid, g.tid[rs]))
    for k, (offs, _, tids, ranks) in g.sends.items():
        kno = key_no.get(k)
        if kno is None:
            kno = key_no[k] = len(keys)
            keys.append(k)
        tid_parts.append(tids)
        key_parts.append(np.full(len(offs), kno, dtype=i64))
        off_parts.append(offs)
        rank_parts.append(ranks)
    T, K, Of, R = (
        np.concatenate(x) if x else np.zeros(0, dtype=i64)
        for x in (tid_parts, key_parts, off_parts, rank_parts)
    )
    # Arrays are dropped (del) once dead: later ones then reuse their memory instead of
    # touching fresh pages, which cost this stage more than its arithmetic.
    del tid_parts, key_parts, off_parts, rank_parts
    live = ~fail[T]
    # One array at a time (here and below): a tuple assignment would hold every old and
    # new array at once, and this stage's peak of fresh memory is what it pays for.
    T = T[live]
    K = K[live]
    Of = Of[live]
    R = R[live]
    nk = max(len(keys), 1)
    # expired: per key, the running maximum of offsets in op order; the first op where it
    # reaches q is the one whose time expired[k][q] holds.
    order = np.argsort(K * (n + 1) + T, kind="stable")
    eT, eK, eO = T[order], K[order], Of[order]
    big = int(eO.max(initial=0)) + 2
    if nk * big < 2**62:  # the key folded into the offset: one running maximum for all keys

        def fold(kk: np.ndarray, offs: np.ndarray) -> np.ndarray:
            return kk * big + offs

    else:  # offsets too large for that: by their rank among the offsets instead
        uniq = np.unique(eO)
        big = len(uniq) + 1

        def fold(kk: np.ndarray, offs: np.ndarray) -> np.ndarray:
            return kk * big + np.searchsorted(uniq, offs, side="left")

    reach = np.maximum.accumulate(fold(eK, eO)) if len(eK) else eK
    max_off = np.full(nk, -1, dtype=i64)
    np.maximum.at(max_off, eK, eO)
    del order, eK, eO, live
    # Steps: ok polls/txns, numbered per process; poll_at[start[p] + seq - 1] is step seq's op.
    ptids = np.flatnonzero(poll)
    poll_at = ptids[np.argsort(proc[ptids], kind="stable")]
    nproc = int(proc.max(initial=-1)) + 1
    steps = np.bincount(proc[poll_at], minlength=nproc).astype(i64)
    start = np.zeros(nproc + 1, dtype=i64)
    np.cumsum(steps, out=start[1:])
    seq_of = np.zeros(n, dtype=i64)
    seq_of[poll_at] = np.arange(len(poll_at)) - start[proc[poll_at]] + 1
    # Assign/subscribe ops: position in ix.events, and per process the ok ones.
    sub_before = np.fromiter((b for b, _ in ix.subs), dtype=i64, count=len(ix.subs))
    ev_of_tid = np.arange(n) + np.searchsorted(sub_before, np.arange(n), side="right")
    proc_no = cols.process_no
    xs: dict[int, list] = {}  # process -> [(event position, steps done, {key no: rank in keep})]
    ok_subs = [
        (j, before, op, proc_no[op.process])
        for j, (before, op) in enumerate(ix.subs)
        if op.type == OK and op.process in proc_no  # (a process with no ops never has a lag)
    ]
    # Steps of its process done before each: polls of that process with a smaller op id.
    by_proc = proc[poll_at] * (n + 1) + poll_at
    dones = (
        np.searchsorted(by_proc, np.fromiter((pn * (n + 1) + b for _, b, _, pn in ok_subs), dtype=i64))
        - start[np.fromiter((pn for *_, pn in ok_subs), dtype=i64)]
    ).tolist()
    for (j, before, op, pn), done in zip(ok_subs, dones, strict=True):
        keep = {key_of(k) for k in (op.value or ())} if op.f == "assign" else set()
        ranks = {key_no[k]: r for r, k in enumerate(keep) if k in key_no}
        xs.setdefault(pn, []).append((before + j, done, ranks))
    state_rank = np.full(nproc, len(ix.events), dtype=i64)
    if len(poll_at):
        np.minimum.at(state_rank, proc[poll_at], ev_of_tid[poll_at])
    for pn, evs in xs.items():
        state_rank[pn] = min(int(state_rank[pn]), evs[0][0])
    # Steps that touch a key: one per (op, key), the highest offset and the least rank.
    m = poll[T]
    T = T[m]
    K = K[m]
    Of = Of[m]
    R = R[m]
    order = np.argsort(T * nk + K, kind="stable")
    T = T[order]
    K = K[order]
    Of = Of[order]
    R = R[order]
    code = T * nk + K
    new = np.ones(len(code), dtype=bool)
    new[1:] = code[1:] != code[:-1]
    at = np.flatnonzero(new)
    if len(at):
        Of, R = np.maximum.reduceat(Of, at), np.minimum.reduceat(R, at)
        T, K = T[at], K[at]
    del m, code, new, at
    P = proc[T]
    order = np.argsort(P * nk + K, kind="stable")  # per (process, key), in op order
    T = T[order]
    K = K[order]
    Of = Of[order]
    R = R[order]
    P = P[order]
    del order
    S = seq_of[T]
    E = ev_of_tid[T]
    # Epoch: how many ok assign/subscribe ops of its process came before the step.
    # (It came after step `done` of its process: before every later step.)
    epoch = np.zeros(len(T), dtype=i64)
    if xs:
        xk = np.sort(np.fromiter((pn * (n + 1) + e[1] for pn, evs in xs.items() for e in evs), dtype=i64))
        first_x = np.searchsorted(xk, P * (n + 1), side="left")
        epoch = np.searchsorted(xk, P * (n + 1) + S - 1, side="right") - first_x
    pair = np.ones(len(T), dtype=bool)
    del T, seq_of, ev_of_tid  # (their parts for the steps are in P, S and E)
    pair[1:] = (P[1:] != P[:-1]) | (K[1:] != K[:-1])
    block = pair.copy()
    block[1:] |= epoch[1:] != epoch[:-1]
    b_at = np.flatnonzero(block)
    b_max = np.maximum.reduceat(Of, b_at) if len(b_at) else Of
    # The walk: each (process, key), its blocks' first steps and the assign/subscribe ops.
    cands: list[tuple] = []  # (process no, step, key no, offset + 1, order of the close)
    b_first = np.zeros(len(b_at), dtype=i64)  # the run's offset after each block's first step
    keep_at: dict[int, dict[int, list[int]]] = {}  # process -> key -> its ok assigns keeping it
    for pn, evs in xs.items():
        d = keep_at[pn] = {}
        for x, (_, _, ranks) in enumerate(evs):
            for kno in ranks:
                d.setdefault(kno, []).append(x)
    inf_ev = len(ix.events) + 1

    def walk(pn: int, kno: int, st: list | None, a: int, b: int) -> list | None:
        """Apply process pn's ok assign/subscribe ops a..b-1 to key kno's run `st`."""
        evs = xs[pn]
        lst = keep_at[pn].get(kno, ())
        x = a
        while x < b:
            i = bisect_left(lst, x)
            if st is None:
                if i == len(lst) or lst[i] >= b:
                    return None
                x = lst[i]
                ev, done, ranks = evs[x]
                st = [-1, done + 1, (ev, ranks[kno])]
                x += 1
                continue
            while i < len(lst) and lst[i] == x and x < b:
                i += 1
                x += 1
            if x >= b:
                break
            ev, done, _ = evs[x]
            if done >= st[1]:
                cands.append((pn, done, kno, st[0] + 1, (ev, 0, *st[2])))
            st = None
            x += 1
        return st

    def finish(pn: int, kno: int, st: list | None, a: int) -> None:
        if pn in xs:
            st = walk(pn, kno, st, a, len(xs[pn]))
        if st is not None and steps[pn] >= st[1]:
            cands.append((pn, int(steps[pn]), kno, st[0] + 1, (inf_ev, int(state_rank[pn]), *st[2])))

    bl = b_at.tolist()
    b_pair = pair[b_at].tolist()
    bP, bK, bE = P[b_at].tolist(), K[b_at].tolist(), epoch[b_at].tolist()
    bS, bO, bEv, bR, bM = (
        S[b_at].tolist(),
        Of[b_at].tolist(),
        E[b_at].tolist(),
        R[b_at].tolist(),
        b_max.tolist(),
    )
    del pair, epoch, b_max
    seen_pairs: dict[int, set] = {}
    st: list | None = None
    cur = 0
    for i in range(len(bl)):
        pn, kno = bP[i], bK[i]
        if b_pair[i]:
            if i:
                finish(bP[i - 1], bK[i - 1], st, cur)
            st, cur = None, 0
            seen_pairs.setdefault(pn, set()).add(kno)
        if pn in xs and bE[i] > cur:
            st = walk(pn, kno, st, cur, bE[i])
            cur = bE[i]
        s_, mo = bS[i], bO[i]
        if st is None:
            st = [mo, 0, (bEv[i], bR[i])]
        elif mo > st[0]:
            if s_ - 1 >= st[1]:
                cands.append((pn, s_ - 1, kno, st[0] + 1, (bEv[i], 0, bR[i], 0)))
            st[0], st[1] = mo, 0
        else:
            st[1] = 0
        b_first[i] = st[0]
        if bM[i] > st[0]:
            st[0] = bM[i]
    if bl:
        finish(bP[-1], bK[-1], st, cur)
    for pn, d in keep_at.items():  # keys kept by an assign that the process never read
        for kno in d:
            if kno not in seen_pairs.get(pn, ()):
                finish(pn, kno, None, 0)
    del bl, b_pair, bP, bK, bE, bS, bO, bEv, bR, bM, seen_pairs
    # Closes inside blocks: a step whose offset beats the run's maximum so far.
    w = Of.copy()
    w[b_at] = b_first
    bid = np.cumsum(block) - 1
    top = int(w.max(initial=0)) + 1
    if len(b_at) * top < 2**62:
        run_max = np.maximum.accumulate(bid * top + w) - bid * top if len(w) else w
    else:  # by rank instead of value
        vals, rank = np.unique(w, return_inverse=True)
        rank = rank.reshape(-1).astype(i64)
        run_max = vals[np.maximum.accumulate(bid * len(vals) + rank) - bid * len(vals)]
    del w, bid
    j = np.flatnonzero(~block)
    del block
    j = j[Of[j] > run_max[j - 1]]
    cP = np.concatenate((P[j], np.asarray([c[0] for c in cands], dtype=i64)))
    cS = np.concatenate((S[j] - 1, np.asarray([c[1] for c in cands], dtype=i64)))
    cK = np.concatenate((K[j], np.asarray([c[2] for c in cands], dtype=i64)))
    cQ = np.concatenate((run_max[j - 1] + 1, np.asarray([c[3] for c in cands], dtype=i64)))
    del P, S, K, Of, run_max
    good = (cQ <= max_off[cK]) & (cS >= 1)
    none = {"time": 0.0, "lag": 0.0, "process": None, "key": None}
    if not good.any():
        return none
    cP, cS, cK, cQ = cP[good], cS[good], cK[good], cQ[good]
    idx = np.flatnonzero(good)
    t_poll = inv_time[poll_at[start[cP] + cS - 1]]
    t_exp = op_time[eT[np.searchsorted(reach, fold(cK, cQ), side="left")]]
    lag = t_poll - t_exp
    best = int(lag.max())
    if best <= 0:
        return none
    ties = np.flatnonzero(lag == best)

    def close_order(c: int) -> tuple:
        i = int(idx[c])
        if i < len(j):
            jj = int(j[i])
            return (int(E[jj]), 0, int(R[jj]), 0)
        return cands[i - len(j)][4]

    c = min(ties.tolist(), key=close_order)
    tp = int(poll_at[start[cP[c]] + cS[c] - 1])
    return {
        "time": int(t_poll[c]) / 1e9,
        "lag": best / 1e9,
        "process": txns[tp].process,
        "key": keys[int(cK[c])],
    }


def _max_offsets(t: Txn) -> dict[Any, int]:
    """Highest known offset per key that t read or sent (not to be modified)."""
    if not t.sends:
        return t.max_read
    out = dict(t.max_read)
    for k, _, o in t.sends:
        if o is not None and o > out.get(k, -1):
            out[k] = o
    return out


def info_causes(ix: QueueIndex) -> list[dict[str, Any]]:
    """Why ops ended indeterminate: each distinct error string of info ops, with a count."""
    c: Counter = Counter()
    for t in ix.txns:
        if t.type == INFO:
            err = t.op.get("error")
            c[err if isinstance(err, str) else str(err)] += 1
    return [{"error": e, "count": n} for e, n in c.most_common()]


def _name(t: Txn) -> str:
    return f"op {t.op.index} ({t.type} {t.op.f} by process {t.process})"


_CASES = (
    ("inconsistent-offsets", inconsistent_offset_cases),
    ("duplicate", duplicate_cases),
    ("lost-write", lost_write_cases),
    ("G1a", g1a_cases),
    ("precommitted-read", precommitted_read_cases),
    ("int-poll", int_poll_cases),
    ("int-send", int_send_cases),
    ("process-order", process_order_cases),
)

__all__ = ["check_history"]

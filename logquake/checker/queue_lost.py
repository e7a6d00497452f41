"""Acknowledged values nobody read: lost-write (below what was read) and unseen (at the end and over time)."""

from __future__ import annotations

from itertools import chain, filterfalse, islice, repeat
from typing import Any

import numpy as np

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import (
    QueueIndex,
    txn_columns,
    txn_name,
)
from logquake.checker.result import op_ref

UNSEEN_VALUES_CAP = 32
UNSEEN_POINTS = 200


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
        # (C-level loops: a key's reads and log run to hundreds of thousands of values.)
        bound = max(map(first.get, read, repeat(-1, len(read))), default=-1)
        if ko.conflicts:  # offsets holding two values: each of them, in log order
            logged = chain.from_iterable(map(ko.values_at, range(bound + 1)))
        else:
            logged = islice(ko.values, bound + 1)
        for v in filterfalse(read.__contains__, logged):
            if last.get(v, first[v]) > bound:
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
                "explanation": f"{txn_name(w)} sent {v} to key {k} (index {first[v]}), and ok "
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


def unseen_analysis(ix: QueueIndex) -> dict[str, Any]:
    """Values ok ops sent that no ok op has polled, over time and at the end.

    A value is unseen from the first ok op that sent it until the first ok op that
    polled it, unless that poll came first; the index knows each value's first ok
    reader, so only the sends are looked at here, never the reads. Per key, each value's
    first ok send (with or without an offset) is looked up among the values ok ops read
    (sorted); the count changes +1 at that send and -1 at the first read, unless the read
    came first.
    """
    g = ix.groups
    cols = txn_columns(ix)
    n = len(ix.txns)
    unseen: dict[Any, list] = {}
    plus, minus = [], []
    empty = np.zeros(0, dtype=np.int64)
    for k in g.sends.keys() | g.bare_sends.keys():
        _, vals, tids, ranks = g.sends.get(k, (empty, empty, empty, empty))
        bare = g.bare_sends.get(k)
        if bare is not None:  # in op order, then the op's order of sends
            vals, tids, ranks = (np.concatenate(x) for x in zip((vals, tids, ranks), bare, strict=True))
            order = np.lexsort((ranks, tids))
            vals, tids = vals[order], tids[order]
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

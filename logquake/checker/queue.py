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

import gc
from collections import Counter, defaultdict
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

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
)
from logquake.checker.result import anomaly_entry, op_ref, run_safely, verdict
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
    paused = gc.isenabled()
    gc.disable()
    try:
        return _check(ops, opts)
    finally:
        if paused:
            gc.enable()


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
    return result


def _assemble(found, counts, opts, errors, *, timed_out, nothing, ix) -> dict[str, Any]:
    order = {t: i for i, t in enumerate(QUEUE_TYPES)}
    anomalies = {
        t: anomaly_entry(found[t], count=counts.get(t), cap=opts.max_examples)
        for t in sorted(found, key=lambda t: order.get(t, len(order)))
    }
    out = verdict(
        anomalies, allowed_types(opts), analysis_errors=errors, timed_out=timed_out, nothing_checked=nothing
    )
    out["anomalies"] = anomalies
    if errors:
        out["analysis_errors"] = errors
    if timed_out:
        out["unknown_because"] = "the cycle search ran out of its time budget"
    elif nothing:
        out["unknown_because"] = "the history holds no send, poll or txn ops to check"
    elif errors:
        out["unknown_because"] = "an analysis failed: " + ", ".join(sorted(errors))
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
            if pairs and any(p[1] == v for p in pairs):
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
    txns = ix.txns if ix.ragged is None else [ix.txns[i] for i in ix.ragged]
    for t in txns:
        if not t.reads:
            continue
        rebalanced = None
        for (k, pairs), pos in zip(t.reads.items(), t.pos, strict=True):
            if pos[CONTIGUOUS] or len(pairs) < 2:
                continue  # the common case, decided once by the index
            if rebalanced is None:
                rebalanced = _rebalanced_keys(t.op)
            if k in rebalanced:
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
    skips, nm_polls, nm_sends = [], [], []
    last_reads: dict[Any, dict] = {}
    last_sends: dict[Any, dict] = {}
    orders = ix.orders
    for ev in ix.events:
        if isinstance(ev, Op):  # assign / subscribe
            lr = last_reads.get(ev.process)
            if lr:
                keep = set() if ev.get("seek_to_beginning") else {key_of(k) for k in (ev.value or ())}
                last_reads[ev.process] = {k: x for k, x in lr.items() if k in keep}
            continue
        t: Txn = ev
        p = t.process
        if t.reads:
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
                        kind, e = _step(orders[k], prev[0], first[0], v0, first[1], k)
                        e["ops"] = [op_ref(prev[2].op), op_ref(t.op)]
                        e["explanation"] = _proc_words(p, prev[2], t, k, v0, first[1], kind, "read")
                        (skips if kind == "skip" else nm_polls).append(e)
                if ok:
                    i1 = pos[LAST]
                    if i1 is not None:  # (index, value, op, pairs whose last holds the value)
                        lr[k] = (i1, None, t, pairs)
                    else:
                        last = _last_index(orders[k], pairs)
                        if last is not None:
                            lr[k] = (last[0], last[1], t, None)
        if t.sends and t.type != FAIL:
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
    skips.sort(key=lambda e: -e["delta"])
    nm_polls.sort(key=lambda e: e["delta"])
    nm_sends.sort(key=lambda e: e["delta"])
    return {"poll-skip": skips, "nonmonotonic-poll": nm_polls, "nonmonotonic-send": nm_sends}


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
    poll of that run.
    """
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

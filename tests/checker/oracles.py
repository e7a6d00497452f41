"""Reference oracles: the queue checker's ordering and lag analyses as plain loops.

The product computes these on arrays (queue_process, queue_lost, queue_lag), which is fast
but hard to read. Here each is a walk over the index's ops in history order, written for
clarity, not speed; test_queue_oracles.py compares the two on random histories. Each
returns what the product's function returns, so a comparison is one `==`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from typing import Any

import numpy as np

from logquake.checker import queue_lag, queue_lost
from logquake.checker.queue_index import KeyOrder, QueueIndex, Txn, key_of, txn_name
from logquake.checker.queue_internal import classify_step
from logquake.checker.result import op_ref
from logquake.history import FAIL, OK, Op


def process_order(ix: QueueIndex) -> dict[str, list]:
    """queue_process.process_order_cases: poll-skip, nonmonotonic-poll, nonmonotonic-send."""
    skips, nm_polls = _poll_order(ix)
    nm_sends = _send_order(ix)
    skips.sort(key=lambda e: -e["delta"])
    nm_polls.sort(key=lambda e: e["delta"])
    nm_sends.sort(key=lambda e: e["delta"])
    return {"poll-skip": skips, "nonmonotonic-poll": nm_polls, "nonmonotonic-send": nm_sends}


def _poll_order(ix: QueueIndex) -> tuple[list, list]:
    """Each op's first read of a key against the last one its process's previous ok op read.

    An assign or subscribe keeps only the keys it still names; seek_to_beginning forgets all.
    """
    skips: list = []
    nm_polls: list = []
    last: dict[Any, dict] = {}  # process -> key -> (dense index, value, op)
    for ev in ix.events:
        if isinstance(ev, Op):  # assign / subscribe
            keep = set() if ev.get("seek_to_beginning") else {key_of(k) for k in (ev.value or ())}
            last[ev.process] = {k: x for k, x in last.get(ev.process, {}).items() if k in keep}
            continue
        t: Txn = ev
        mine = last.setdefault(t.process, {})
        for k, pairs in t.reads.items():
            ko = ix.orders[k]
            prev = mine.get(k)
            first = _first_index(ko, pairs)
            if prev is not None and first is not None and first[0] - prev[0] != 1:
                kind, e = classify_step(ko, prev[0], first[0], prev[1], first[1], k)
                e["ops"] = [op_ref(prev[2].op), op_ref(t.op)]
                e["explanation"] = _words(t.process, prev[2], t, k, prev[1], first[1], kind, "read")
                (skips if kind == "skip" else nm_polls).append(e)
            end = _last_index(ko, pairs)
            if t.type == OK and end is not None:
                mine[k] = (*end, t)
    return skips, nm_polls


def _send_order(ix: QueueIndex) -> list:
    """The first value an ok/info op sends to a key against the last its process sent there."""
    out = []
    last: dict[Any, dict] = {}  # process -> key -> (dense index, value, op)
    for t in ix.txns:
        if t.type == FAIL:
            continue
        mine = last.setdefault(t.process, {})
        seen: set = set()
        for k, v, o in t.sends:
            ko = ix.orders.get(k)
            # Only a committed op's offsets are in the version order; else go by value.
            i = ko.index(o if t.committed else None, v) if ko is not None else None
            prev = mine.get(k)
            if k not in seen and prev is not None and i is not None and i - prev[0] < 1:
                _, e = classify_step(ko, prev[0], i, prev[1], v, k)
                e["ops"] = [op_ref(prev[2].op), op_ref(t.op)]
                e["explanation"] = _words(t.process, prev[2], t, k, prev[1], v, "nonmonotonic", "sent")
                out.append(e)
            seen.add(k)
            if i is not None:
                mine[k] = (i, v, t)
    return out


def _first_index(ko: KeyOrder, pairs: list) -> tuple | None:
    for o, v in pairs:
        i = ko.index(o, v)
        if i is not None:
            return i, v
    return None


def _last_index(ko: KeyOrder, pairs: list) -> tuple | None:
    return _first_index(ko, pairs[::-1])


def _words(p, a: Txn, b: Txn, k, v1, v2, kind: str, verb: str) -> str:
    how = "skipping over values between them" if kind == "skip" else "going backwards in the log"
    return f"process {p} {verb} {v1} of key {k} in {txn_name(a)}, then {v2} in its next {txn_name(b)}, {how}"


def unseen(ix: QueueIndex) -> dict[str, Any]:
    """queue_lost.unseen_analysis: a value is unseen from the first ok op that sent it until
    the first ok op that polled it, unless that poll came first."""
    delta: dict[int, int] = defaultdict(int)  # op id -> change of the unseen count there
    never: dict[Any, list] = {}
    counted: set = set()
    for t in ix.txns:
        if t.type != OK:
            continue
        for k, v, _ in t.sends:
            if (k, v) in counted:
                continue
            counted.add((k, v))
            r = ix.reads_ok.get(k, {}).get(v)
            if r is None:
                never.setdefault(k, []).append(v)
            elif r < t.id:
                continue  # polled before it was acknowledged: never unseen
            else:
                delta[r] -= 1
            delta[t.id] += 1
    total = 0
    points = []
    for tid in sorted(delta):
        if delta[tid]:
            total += delta[tid]
            points.append((ix.txns[tid].op.time, total))
    return queue_lost._unseen_result(never, total, points)


def realtime_lag(ix: QueueIndex) -> dict[str, Any]:
    """queue_lag.realtime_lag, walking the events in history order.

    expired(k, i) is when offset i-1 of key k stopped being the tail: when some op first
    sent or read offset i or beyond (None if none did). Per process and key a
    run is a stretch of polls at one highest offset o; it closes when o rises, when an
    assign/subscribe drops the key, or at the end, and its lag is the time of its last poll
    minus expired(k, o + 1). The worst close wins; ties go to the one closed first.
    """
    reached: dict[Any, list[tuple[int, int]]] = defaultdict(list)  # key -> [(new top offset, time)]
    for t in ix.txns:
        if t.type == FAIL:
            continue
        for k, o in _max_offsets(t).items():
            if not reached[k] or o > reached[k][-1][0]:
                reached[k].append((o, t.op.time))

    def expired(k: Any, i: int) -> int | None:
        at = bisect_left(reached.get(k, []), (i, -1))
        return reached[k][at][1] if at < len(reached.get(k, [])) else None

    closes: list[tuple[int, int, Any, Any]] = []  # (lag, poll time, process, key), in close order
    runs: dict[Any, dict] = {}  # process -> key -> (offset, step of the run's first poll)
    steps: dict[Any, int] = defaultdict(int)  # process -> ok polls so far
    last_poll: dict[Any, int] = {}  # process -> invoke time of its latest ok poll

    def close(p: Any, k: Any, o: int, first: int) -> None:
        at = expired(k, o + 1)
        if steps[p] >= first and at is not None:
            closes.append((last_poll[p] - at, last_poll[p], p, k))

    for ev in ix.events:
        if isinstance(ev, Op):
            if ev.type != OK:
                continue
            mine = runs.setdefault(ev.process, {})
            keep = {key_of(k) for k in (ev.value or ())} if ev.f == "assign" else set()
            for k in [k for k in mine if k not in keep]:
                close(ev.process, k, *mine.pop(k))
            for k in keep:
                mine.setdefault(k, (-1, steps[ev.process] + 1))
            continue
        t: Txn = ev
        if t.type != OK or t.op.f == "send":
            continue
        p = t.process
        mine = runs.setdefault(p, {})
        for k, o in _max_offsets(t).items():
            run = mine.get(k)
            if run is not None and o > run[0]:
                close(p, k, *run)  # (steps[p] is still the step before this one)
            if run is None or o > run[0]:
                mine[k] = (o, steps[p] + 1)
        steps[p] += 1
        last_poll[p] = t.inv_time
    for p, mine in runs.items():
        for k, run in mine.items():
            close(p, k, *run)
    best = (0, 0, None, None)
    for c in closes:
        if c[0] > best[0]:
            best = c
    worst = {"time": best[1] / 1e9, "lag": best[0] / 1e9, "process": best[2], "key": best[3]}
    if best[0] <= 0:
        return {"worst": worst, "over_time": []}
    t_poll = np.asarray([c[1] for c in closes], dtype=np.int64)
    lags = np.asarray([c[0] for c in closes], dtype=np.int64)
    return {"worst": worst, "over_time": queue_lag._peaks(t_poll, lags)}


def _max_offsets(t: Txn) -> dict[Any, int]:
    """Highest offset per key that t read or sent."""
    out: dict[Any, int] = {}
    for k, pairs in t.reads.items():
        for o, _ in pairs:
            out[k] = max(out.get(k, -1), o)
    for k, _, o in t.sends:
        if o is not None:
            out[k] = max(out.get(k, -1), o)
    return out

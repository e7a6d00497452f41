"""The worst realtime lag: how far behind the log a consumer's poll was."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np

from logquake.checker.queue_index import (
    QueueIndex,
    key_of,
    txn_columns,
)
from logquake.history import OK

LAG_POINTS = 200  # points of the lag series in results.json (the report plots them)


def realtime_lag(ix: QueueIndex) -> dict[str, Any]:
    """The poll furthest behind the log, as Jepsen measures it (a lower bound), and the
    peak lag of every run over time: {"worst": {time, lag, process, key}, "over_time":
    [{time, lag}]} (seconds; at most LAG_POINTS points, the worst of each stretch).

    expired[k][i] is when offset i-1 of key k was known to be no longer the tail (some op
    had sent or polled a later offset). A poll at time t whose process has read key k up
    to offset o lags by t - expired[k][o+1]. For each process and key the lag only grows
    while its offset stays put, so it is evaluated once per run of one offset, at the last
    poll of that run. Ties go to the run closed first.

    Each ok poll or txn is a step of its process (seq 1, 2, ...); per (process, key) the
    highest offset it read or sent at a step, `mo`, forms runs of the running maximum,
    and each run closes when that maximum rises (lag measured at the step before), when
    an assign/subscribe drops the key, or at the end. Between two assign/subscribe ops of
    a process (an epoch) nothing resets a run, so the closes inside such a block are
    array operations; only each block's first step and the assign/subscribe ops are
    walked in Python. Every close is kept with where a walk over the events in history
    order would have made it (tests/checker/oracles.py is that walk), so equal lags pick
    the same one.
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
    del rs
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
    # (max_off first, from the unsorted arrays: a maximum is the same in any order.)
    max_off = np.full(nk, -1, dtype=i64)
    np.maximum.at(max_off, K, Of)
    sort_key = K * (n + 1)
    sort_key += T
    order = np.argsort(sort_key, kind="stable")
    del sort_key
    eT = T[order]
    big = int(Of.max(initial=0)) + 2
    uniq = None
    if nk * big < 2**62:  # the key folded into the offset: one running maximum for all keys

        def fold(kk: np.ndarray, offs: np.ndarray) -> np.ndarray:
            return kk * big + offs

    else:  # offsets too large for that: by their rank among the offsets instead
        uniq = np.unique(Of)
        big = len(uniq) + 1

        def fold(kk: np.ndarray, offs: np.ndarray) -> np.ndarray:
            return kk * big + np.searchsorted(uniq, offs, side="left")

    # reach = fold(K, Of) in key order, then its running maximum: in place, one array.
    reach = K[order]
    reach *= big
    reach += Of[order] if uniq is None else np.searchsorted(uniq, Of[order], side="left")
    if len(reach):
        np.maximum.accumulate(reach, out=reach)
    del order, live
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
    sort_key = T * nk
    sort_key += K
    order = np.argsort(sort_key, kind="stable")
    del sort_key
    T = T[order]
    K = K[order]
    Of = Of[order]
    R = R[order]
    code = T * nk
    code += K
    new = np.ones(len(code), dtype=bool)
    new[1:] = code[1:] != code[:-1]
    at = np.flatnonzero(new)
    if len(at):
        Of, R = np.maximum.reduceat(Of, at), np.minimum.reduceat(R, at)
        T, K = T[at], K[at]
    del m, code, new, at
    P = proc[T]
    sort_key = P * nk
    sort_key += K
    order = np.argsort(sort_key, kind="stable")  # per (process, key), in op order
    del sort_key
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
        at = P * (n + 1)
        first_x = np.searchsorted(xk, at, side="left")
        at += S
        at -= 1
        epoch = np.searchsorted(xk, at, side="right")
        del at
        epoch -= first_x
        del first_x
    pair = np.ones(len(T), dtype=bool)
    del T, seq_of, ev_of_tid  # (their parts for the steps are in P, S and E)
    pair[1:] = (P[1:] != P[:-1]) | (K[1:] != K[:-1])
    block = pair.copy()
    block[1:] |= epoch[1:] != epoch[:-1]
    b_at = np.flatnonzero(block)
    b_max = np.maximum.reduceat(Of, b_at) if len(b_at) else Of
    # The walk: each (process, key), its blocks' first steps and the assign/subscribe ops.
    cands: list[tuple] = []  # (process no, step, key no, offset, order of the close)
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
                cands.append((pn, done, kno, st[0], (ev, 0, *st[2])))
            st = None
            x += 1
        return st

    def finish(pn: int, kno: int, st: list | None, a: int) -> None:
        if pn in xs:
            st = walk(pn, kno, st, a, len(xs[pn]))
        if st is not None and steps[pn] >= st[1]:
            cands.append((pn, int(steps[pn]), kno, st[0], (inf_ev, int(state_rank[pn]), *st[2])))

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
                cands.append((pn, s_ - 1, kno, st[0], (bEv[i], 0, bR[i], 0)))
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
    E, R = E[j], R[j]  # (only the closes' are read again, by close_order)
    cP = np.concatenate((P[j], np.asarray([c[0] for c in cands], dtype=i64)))
    cS = np.concatenate((S[j] - 1, np.asarray([c[1] for c in cands], dtype=i64)))
    cK = np.concatenate((K[j], np.asarray([c[2] for c in cands], dtype=i64)))
    cQ = np.concatenate((run_max[j - 1], np.asarray([c[3] for c in cands], dtype=i64)))
    del P, S, K, Of, run_max
    # cQ is the run's offset; the lag is from when the offset after it existed. Kept as the
    # offset itself until known to be below the key's highest: 2^63-1 has no offset after it.
    good = (cQ < max_off[cK]) & (cS >= 1)
    none = {"worst": {"time": 0.0, "lag": 0.0, "process": None, "key": None}, "over_time": []}
    if not good.any():
        return none
    cP, cS, cK, cQ = cP[good], cS[good], cK[good], cQ[good]
    idx = np.flatnonzero(good)
    t_poll = inv_time[poll_at[start[cP] + cS - 1]]
    t_exp = op_time[eT[np.searchsorted(reach, fold(cK, cQ + 1), side="left")]]
    lag = t_poll - t_exp
    best = int(lag.max())
    if best <= 0:
        return none
    over_time = _peaks(t_poll, lag)
    ties = np.flatnonzero(lag == best)

    def close_order(c: int) -> tuple:
        i = int(idx[c])
        if i < len(j):
            return (int(E[i]), 0, int(R[i]), 0)
        return cands[i - len(j)][4]

    c = min(ties.tolist(), key=close_order)
    tp = int(poll_at[start[cP[c]] + cS[c] - 1])
    worst = {
        "time": int(t_poll[c]) / 1e9,
        "lag": best / 1e9,
        "process": txns[tp].process,
        "key": keys[int(cK[c])],
    }
    return {"worst": worst, "over_time": over_time}


def _peaks(t_poll: np.ndarray, lag: np.ndarray) -> list[dict[str, float]]:
    """Each run's peak lag (> 0) at the poll where it peaked, in time (then lag) order; when there are
    more than LAG_POINTS, the worst of each of LAG_POINTS equal stretches of them."""
    pos = lag > 0
    t, y = t_poll[pos], lag[pos]
    order = np.lexsort((y, t))
    t, y = t[order], y[order]
    if len(t) > LAG_POINTS:
        bounds = np.arange(LAG_POINTS) * len(t) // LAG_POINTS
        at = bounds + np.fromiter(
            (np.argmax(y[a:b]) for a, b in zip(bounds.tolist(), [*bounds[1:].tolist(), len(t)], strict=True)),
            dtype=np.int64,
            count=LAG_POINTS,
        )
        t, y = t[at], y[at]
    return [{"time": a / 1e9, "lag": b / 1e9} for a, b in zip(t.tolist(), y.tolist(), strict=True)]

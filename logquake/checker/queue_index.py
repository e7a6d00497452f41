"""One pass over a queue history: the indexes every queue analysis reads.

The queue analyses (queue.py) never walk raw ops; they read this index, built once:
each client op of f send/poll/txn as a `Txn` (its sends and reads, parsed once), the
per-process sequence of those and of assign/subscribe ops, writer-of, the first ok op
to read each value, the version order of every key, and where each op's reads of a key
landed in it. Reads are the bulk of a history (millions of [offset, value] pairs), so
they are walked as few times as possible, and in C where possible (dict, map, slices).

The version order of a key is built, as in Jepsen, from every poll (ok, info and fail:
a poll shows what the log held whatever became of its transaction) plus the sends of ops
that must have committed (ok, or info with a value read by an ok op). Offsets are then
renumbered densely, so the offsets that transaction markers take are not gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from logquake.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op

QUEUE_FS = frozenset({"send", "poll", "txn"})
SUB_FS = frozenset({"assign", "subscribe"})
INF = float("inf")
_first, _second = itemgetter(0), itemgetter(1)


_NO_POS: list = []  # shared by ops without reads (never added to)
_NO_MAX: dict = {}
# Shared by ops without sends / without reads (never added to): half a million empty
# containers a 1M-op history would otherwise keep, each a fresh page touched.
_NO_SENDS: list = []
_NO_READS: dict = {}


class Txn:
    """A completed (or never completed) send/poll/txn op, parsed.

    `sends` is [(key, value, offset or None)] in op order; `reads` maps a key to the
    [offset, value] pairs polled, in order, across all poll micro-ops of the op; `pos`
    says where each key's reads landed in its version order.
    """

    __slots__ = (
        "id",
        "op",
        "type",
        "process",
        "sends",
        "reads",
        "inv_index",
        "comp_index",
        "inv_time",
        "committed",
        "pos",
        "max_read",
    )

    def __init__(self, id: int, op: Op, inv: Op | None, sends: list, reads: dict) -> None:
        self.id = id
        self.op = op
        self.type = op.type
        self.process = op.process
        self.sends = sends
        self.reads = reads
        self.inv_index = inv.index if inv is not None else op.index
        self.inv_time = inv.time if inv is not None else op.time
        # An info op never completed: it may have taken effect at any later time.
        self.comp_index = INF if op.type == INFO else op.index
        self.committed = op.type == OK
        self.pos: list[tuple] = _NO_POS  # per key read, in `reads` order: see _positions
        self.max_read: dict[Any, int] = _NO_MAX  # key -> highest known offset read

    @property
    def is_node(self) -> bool:
        """Takes part in the dependency graph: it happened (ok) or may have (info)."""
        return self.type != FAIL


def txn_name(t: Txn) -> str:
    """How examples name an op: its index, type, f and process."""
    return f"op {t.op.index} ({t.type} {t.op.f} by process {t.process})"


def key_of(k: Any) -> Any:
    """Poll results key by decimal strings (JSON object keys), sends by integers."""
    if type(k) is str:
        try:
            return int(k)
        except ValueError:
            return k
    return k


def _parse(t: Txn, value: Any, keys: dict, g: Gathered, writer_of: dict, failed: dict) -> None:
    """Set t.sends and t.reads from its micro-ops (unfinished ones carry no result), and
    gather them into g, writer_of and failed in the same loop.

    A key's read pairs are the op's own list when one poll read it (no copy: the reads
    are most of a history's memory), a new list when several did. `keys` caches key_of.
    Sends are gathered with their place among the op's sends: _arrays adds the number of
    the op's reads to make it the rank among reads-then-sends, known only at the end.
    """
    if not isinstance(value, list):
        return
    tid, typ = t.id, t.type
    sends: list = []
    reads: dict = {}
    lists, g_key, g_tid, key_no, first_at = g.read_lists, g.group_key, g.group_tid, g.key_no, g.first_at
    base = len(lists)
    new_keys: list | None = None  # (key, place) of ok sends to keys not gathered yet
    for mop in value:
        f = mop[0]
        if f == "send":
            k = keys.get(mop[1])
            if k is None:
                k = keys[mop[1]] = key_of(mop[1])
            x = mop[2] if len(mop) > 2 else None
            if type(x) is list:
                o, v = x[0], x[1]
            else:
                o, v = None, x
            place = len(sends)
            sends.append((k, v, o))
            w = writer_of.get(k)
            if w is None:
                writer_of[k] = w = {}
            w[v] = t
            if typ == FAIL:
                failed.setdefault(k, set()).add(v)
                continue
            if o is None:
                g.bare_ok += typ == OK
                b = g.bare_sends.get(k)
                if b is None:
                    g.bare_sends[k] = b = ([], [], [])
                b[0].append(v)
                b[1].append(tid)
                b[2].append(place)
                continue
            e = g.sends.get(k)
            if e is None:
                g.sends[k] = e = ([], [], [], [])
            e[0].append(o)
            e[1].append(v)
            e[2].append(tid)
            e[3].append(place)
            if typ == OK and k not in first_at:
                if new_keys is None:
                    new_keys = []
                new_keys.append((k, place))
        elif f == "poll" and len(mop) > 1 and mop[1]:
            for ks, pairs in mop[1].items():
                k = keys.get(ks)
                if k is None:
                    k = keys[ks] = key_of(ks)
                got = reads.get(k)
                if got is not None:  # a second poll of k in this op: one group still
                    lists[base + list(reads).index(k)] = reads[k] = got + pairs
                    continue
                reads[k] = pairs
                n = key_no.get(k)
                if n is None:
                    n = key_no[k] = len(key_no)
                    first_at.setdefault(k, (tid, len(reads) - 1))
                lists.append(pairs)
                g_key.append(n)
                g_tid.append(tid)
    if new_keys:  # reads rank before sends, whatever the order of the micro-ops
        for k, place in new_keys:
            first_at.setdefault(k, (tid, len(reads) + place))
    t.sends = sends or _NO_SENDS
    t.reads = reads or _NO_READS


@dataclass(slots=True)
class Gathered:
    """What _gather collects for the version orders, in op order, as it meets each op.

    A group is one op's reads of one key. Groups are numbered in op order, then in the
    op's order of keys (the order of Txn.reads).
    """

    read_lists: list = field(default_factory=list)  # each group's pairs
    group_key: list[int] = field(default_factory=list)  # its key's number (in key_no)
    group_tid: list[int] = field(default_factory=list)  # its op's id
    key_no: dict = field(default_factory=dict)  # key -> number, numbered in the order first read
    # key -> (op id, rank among the op's reads then sends) of its first read, or first
    # send of an ok op with an offset, whichever came first
    first_at: dict = field(default_factory=dict)
    # key -> ([offset], [value], [op id], [place among the op's sends]): sends with an
    # offset of ok and info ops
    sends: dict = field(default_factory=dict)
    # key -> ([value], [op id], [place]): those without an offset
    bare_sends: dict = field(default_factory=dict)
    bare_ok: int = 0  # sends of ok ops without an offset


@dataclass(slots=True)
class KeyOrder:
    """The version order of one key: its log with offsets renumbered densely."""

    offsets: list[int]  # dense index -> offset
    values: list[Any]  # dense index -> value (the first seen, if an offset holds two)
    index_of_offset: dict[int, int]
    first_index: dict[Any, int]  # value -> first dense index holding it
    last_index: dict[Any, int]  # value -> last dense index, for duplicated values only
    dups: dict[Any, list[int]]  # value -> every offset holding it (only when > 1)
    conflicts: dict[int, list[Any]]  # offset -> the distinct values seen there (when > 1)

    def index(self, offset: int | None, value: Any) -> int | None:
        """Dense index of a read or send: by its offset when known, else by its value."""
        if offset is not None:
            i = self.index_of_offset.get(offset)
            if i is not None:
                return i
        return self.first_index.get(value)

    def values_at(self, i: int) -> list[Any]:
        c = self.conflicts.get(self.offsets[i])
        return c if c is not None else [self.values[i]]


@dataclass(slots=True)
class QueueIndex:
    """Everything the queue analyses share, built by `build_index`."""

    txns: list[Txn] = field(default_factory=list)
    # Txns and ok/info assign/subscribe ops, in history order (per-process analyses).
    events: list[Any] = field(default_factory=list)
    writer_of: dict[Any, dict[Any, Txn]] = field(default_factory=dict)
    # key -> value -> id of the first ok op that read it (so `v in reads_ok[k]` as a set).
    reads_ok: dict[Any, dict[Any, int]] = field(default_factory=dict)
    failed_writes: dict[Any, set] = field(default_factory=dict)
    orders: dict[Any, KeyOrder] = field(default_factory=dict)
    client_ops: int = 0
    # The assign/subscribe ops of `events` (ok or info), each as (number of Txns before it, op).
    subs: list[tuple[int, Op]] = field(default_factory=list)
    # Only from the numpy path (queue_flat.ReadGroups): each op's read of each key as
    # arrays, which the analyses of read order use instead of Txn.pos / Txn.max_read (left
    # unset on that path); None from the general path.
    groups: Any = None
    columns: Any = None  # TxnColumns once txn_columns made them; before, _gather's lists

    def writer(self, k: Any, v: Any) -> Txn | None:
        w = self.writer_of.get(k)
        return None if w is None else w.get(v)


@dataclass(frozen=True, slots=True)
class TxnColumns:
    """Fields of every Txn as numpy arrays indexed by op id, for analyses on arrays."""

    ok: np.ndarray
    fail: np.ndarray
    info: np.ndarray
    step: np.ndarray  # ok and not f send: a poll or txn, a step of its process's consumer
    time: np.ndarray  # of the completion (ns)
    inv_time: np.ndarray
    inv_index: np.ndarray  # Txn.inv_index, as floats
    comp_index: np.ndarray  # Txn.comp_index (inf for info ops), as floats
    process: np.ndarray  # dense numbers (0, 1, ...), in order of first appearance
    process_no: dict  # process -> its number


def txn_columns(ix: QueueIndex) -> TxnColumns:
    """ix's TxnColumns, made once (from the lists _gather kept) and kept on ix."""
    if not isinstance(ix.columns, TxnColumns):
        kinds, times, invs, index, inv_index, procs, proc_no = ix.columns
        n = len(kinds)
        kind = np.fromiter(kinds, dtype=np.int8, count=n)
        ok = kind >> 1 == 0
        ix.columns = TxnColumns(
            ok=ok,
            fail=kind >> 1 == 1,
            info=kind >> 1 == 2,
            step=kind == 0,
            time=np.fromiter(times, dtype=np.int64, count=n),
            inv_time=np.fromiter(invs, dtype=np.int64, count=n),
            inv_index=np.fromiter(inv_index, dtype=np.float64, count=n),
            comp_index=np.where(kind >> 1 == 2, INF, np.fromiter(index, dtype=np.float64, count=n)),
            process=np.fromiter(procs, dtype=np.int64, count=n),
            process_no=proc_no,
        )
    return ix.columns


def build_index(ops: list[Op]) -> QueueIndex:
    """Index a history (completion order, as recorded).

    One loop over the ops (_gather) parses them and collects every read and send; the
    numpy path (queue_flat) does the rest on arrays. The general path makes three more
    passes over the reads, each touching a read pair once or twice in C: each key's pairs,
    who read each value first (ok ops, backwards), and where each op's reads of a key land
    in the version order (`Txn.pos`).
    """
    from logquake.checker.queue_flat import flat_index  # here: it imports this module

    ix = QueueIndex()
    gathered = _gather(ix, ops)
    if flat_index(ix, gathered):
        return ix
    # Some offset or value is not a 64-bit integer: the general path.
    first_at = gathered.first_at
    del gathered
    pairs_of = _pairs_of(ix, first_at)
    _first_reads(ix)
    pairs_of = _commit_info(ix, pairs_of, first_at)
    _version_orders(ix, pairs_of)
    pairs_of.clear()
    _positions(ix)
    return ix


def _pairs_of(ix: QueueIndex, first_at: dict) -> dict[Any, list]:
    """key -> every (offset, value) that ok ops sent and any op read, in op order; keys in
    the order first gathered (first_at)."""
    pairs_of: dict[Any, list] = {k: [] for k in sorted(first_at, key=first_at.__getitem__)}
    for t in ix.txns:
        for k, pairs in t.reads.items():
            _check_pairs(t, k, pairs)
            pairs_of[k].extend(pairs)
        if t.committed:
            for k, v, o in t.sends:
                if o is not None:
                    pairs_of[k].append((o, v))
    return pairs_of


def _gather(ix: QueueIndex, ops: list[Op]) -> Gathered:
    """The one loop over the ops: txns, events, writers, and every key's reads and sends."""
    in_flight: dict[Any, Op] = {}
    keys: dict = {}
    txns, events, writer_of, failed = ix.txns, ix.events, ix.writer_of, ix.failed_writes
    gather = Gathered()
    client = 0
    # Columns for txn_columns, while each op is at hand (read back later, they are cold memory).
    c_kind: list[int] = []  # _KIND[type] + 1 if f is send
    c_time: list[int] = []
    c_inv: list[int] = []
    c_index: list[int] = []  # of the completion
    c_inv_index: list[int] = []
    c_proc: list[int] = []  # numbered in order of appearance
    proc_no: dict[Any, int] = {}
    for op in ops:
        p = op.process
        if p == NEMESIS:
            continue
        client += 1
        typ = op.type
        if typ == INVOKE:
            in_flight[p] = op
            continue
        inv = in_flight.pop(p, None)
        f = op.f
        if f in QUEUE_FS:
            value = op.value if op.value is not None else (inv.value if inv is not None else None)
            t = Txn(len(txns), op, inv, _NO_SENDS, _NO_READS)
            _parse(t, value, keys, gather, writer_of, failed)
            txns.append(t)
            events.append(t)
            c_kind.append(_KIND[typ] + (f == "send"))
            c_time.append(op.time)
            c_inv.append(t.inv_time)
            c_index.append(op.index)
            c_inv_index.append(t.inv_index)
            pn = proc_no.get(p)
            if pn is None:
                pn = proc_no[p] = len(proc_no)
            c_proc.append(pn)
        elif f in SUB_FS and (typ == OK or typ == INFO):
            events.append(op)
            ix.subs.append((len(txns), op))
    ix.client_ops = client
    # An op that never completed is indeterminate: Jepsen reads it as info.
    for inv in in_flight.values():
        if inv.f in QUEUE_FS:
            comp = Op(
                index=inv.index,
                time=inv.time,
                process=inv.process,
                type=INFO,
                f=inv.f,
                value=inv.value,
                extra={"error": "never completed"},
            )
            t = Txn(len(txns), comp, inv, _NO_SENDS, _NO_READS)
            _parse(t, inv.value, keys, gather, writer_of, failed)
            txns.append(t)
            events.append(t)
            c_kind.append(_KIND[INFO] + (inv.f == "send"))
            c_time.append(inv.time)
            c_inv.append(inv.time)
            c_index.append(inv.index)
            c_inv_index.append(inv.index)
            c_proc.append(proc_no.setdefault(inv.process, len(proc_no)))
    ix.columns = (c_kind, c_time, c_inv, c_index, c_inv_index, c_proc, proc_no)
    return gather


_KIND = {OK: 0, FAIL: 2, INFO: 4}  # (+ 1 for f send) txn_columns decodes these


def _check_pairs(t: Txn, k: Any, pairs: list) -> None:
    """Raise a ValueError naming the op unless every read is an [offset, value] pair.

    Only the general path looks: on the numpy path a wrong-sized pair changes the count of
    items, which sends the history here (checking every pair there would cost ~0.3 s per
    million ops).
    """
    for p in pairs:
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise ValueError(
                f"op {t.op.index} (process {t.process}) polled key {k!r}: {p!r} is not an [offset, value] pair"
            )


def _first_reads(ix: QueueIndex) -> None:
    """reads_ok: who first read each value, by updating backwards (the earliest wins)."""
    reads_ok = ix.reads_ok
    for t in reversed(ix.txns):
        if t.type != OK or not t.reads:
            continue
        tid = repeat(t.id)
        for k, pairs in t.reads.items():
            d = reads_ok.get(k)
            if d is None:
                reads_ok[k] = d = {}
            d.update(zip(map(_second, pairs), tid, strict=False))
    # Keys in the order they were first read, as a forward pass would have met them.
    txns = ix.txns
    first = {k: min(d.values(), default=len(txns)) for k, d in reads_ok.items()}
    order = sorted(reads_ok, key=lambda k: (first[k], _rank(txns, first[k], k)))
    ix.reads_ok = {k: reads_ok[k] for k in order}


def _rank(txns: list[Txn], tid: int, k: Any) -> int:
    return list(txns[tid].reads).index(k) if tid < len(txns) else 0


def _commit_info(ix: QueueIndex, pairs_of: dict[Any, list], first_at: dict) -> dict[Any, list]:
    """Must have committed: ok, or info with a value some ok op read (Jepsen's rule).

    Their sends join the pairs now, so keys are put back in the order of their first
    appearance (results list keys in that order).
    """
    reads_ok = ix.reads_ok
    moved = False
    for t in ix.txns:
        if t.type == INFO:
            t.committed = any(v in reads_ok.get(k, ()) for k, v, _ in t.sends)
            if not t.committed:
                continue
            for r, (k, v, o) in enumerate(t.sends, len(t.reads)):
                if o is None:
                    continue
                pairs_of.setdefault(k, []).append((o, v))
                at = first_at.get(k)
                if at is None or (t.id, r) < at:
                    first_at[k] = (t.id, r)
                    moved = True
    if not moved:
        return pairs_of
    return {k: pairs_of[k] for k in sorted(pairs_of, key=first_at.__getitem__)}


def _version_orders(ix: QueueIndex, pairs_of: dict[Any, list]) -> None:
    # Let dict/set (C code) find each key's log and any offset holding two values: the
    # pairs are gathered in bulk, and the common case (no conflict) never loops in Python.
    logs: dict[Any, dict] = {}
    mixed: list = []  # keys where some offset holds two values
    for k, allp in pairs_of.items():
        offs, vals = list(map(_first, allp)), list(map(_second, allp))
        log = logs[k] = dict(zip(offs, vals, strict=True))
        log.pop(None, None)
        # Does every pair agree with the log? One C-level comparison of two lists.
        if list(map(log.get, offs)) != vals:
            mixed.append(k)
    # Info txns' sends were gathered last: redo those keys in history order, so each
    # offset lists its values in the order they were first seen.
    ordered = _pairs_in_order(ix, mixed) if mixed else {}
    for k, log in logs.items():
        conflicts: dict[int, list] = {}
        if k in ordered:
            conflicts = _conflicts(ordered[k])
            for o, vs in conflicts.items():
                log[o] = vs[0]
        ix.orders[k] = _key_order(log, conflicts)


def _pairs_in_order(ix: QueueIndex, keys: list) -> dict[Any, list]:
    """Every (offset, value) of these keys, op by op: its reads, then its committed sends."""
    out: dict[Any, list] = {k: [] for k in keys}
    for t in ix.txns:
        for k, pairs in t.reads.items():
            got = out.get(k)
            if got is not None:
                got.extend(pairs)
        if t.committed:
            for k, v, o in t.sends:
                got = out.get(k)
                if got is not None and o is not None:
                    got.append((o, v))
    return out


# Txn.pos entries: where one op's reads of one key landed in the key's version order.
FIRST, LAST, CONTIGUOUS = range(3)
# FIRST / LAST: dense index of the first / last pair's offset (None: unknown offset);
# CONTIGUOUS: the pairs hold consecutive dense indices, in order. Plain tuples: there
# is one per read of a key.
_NOWHERE = (None, None, False)


def _positions(ix: QueueIndex) -> None:
    """Txn.pos: each read of a key placed once, for every analysis of read order.

    Pairs are contiguous when their offsets are exactly the log's offsets between the
    first and the last: one slice comparison in C instead of a lookup per pair.
    """
    orders = ix.orders
    for t in ix.txns:
        if not t.reads:
            continue
        t.pos = pos = []
        t.max_read = max_read = {}
        for k, pairs in t.reads.items():
            ko = orders[k]
            io = ko.index_of_offset
            offs = list(map(_first, pairs))
            if not offs:
                pos.append(_NOWHERE)
                continue
            a, b = io.get(offs[0]), io.get(offs[-1])
            if a is not None and b == a + len(offs) - 1 and offs == ko.offsets[a : b + 1]:
                pos.append((a, b, True))
                max_read[k] = offs[-1]
                continue
            pos.append((a, b, False))
            try:
                m = max(offs)
            except TypeError:  # an unknown (null) offset
                m = max((o for o in offs if o is not None), default=-1)
            if m is not None and m >= 0:  # None: the only offset is unknown
                max_read[k] = m


def _conflicts(allp: list) -> dict[int, list]:
    """Offsets holding more than one value, each with its values in first-seen order."""
    by_offset: dict[int, list] = {}
    for o, v in allp:
        if o is None:
            continue
        vs = by_offset.get(o)
        if vs is None:
            by_offset[o] = [v]
        elif v not in vs:
            vs.append(v)
    return {o: vs for o, vs in by_offset.items() if len(vs) > 1}


def _key_order(log: dict[int, Any], conflicts: dict[int, list]) -> KeyOrder:
    offsets = sorted(log)
    return key_order_sorted(offsets, [log[o] for o in offsets], conflicts)


def key_order_sorted(offsets: list[int], values: list[Any], conflicts: dict[int, list]) -> KeyOrder:
    """A KeyOrder from a key's offsets (sorted, distinct) and the value at each."""
    n = len(offsets)
    dense = list(range(n))  # one int object per index, shared by both dicts
    index_of_offset = dict(zip(offsets, dense, strict=True))
    if not conflicts and len(set(values)) == n:  # the common case: no duplicates
        first = dict(zip(values, dense, strict=True))
        return KeyOrder(
            offsets=offsets,
            values=values,
            index_of_offset=index_of_offset,
            first_index=first,
            last_index={},
            dups={},
            conflicts=conflicts,
        )
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    dups: dict[Any, list[int]] = {}
    for i, v in enumerate(values):
        vs = conflicts.get(offsets[i]) if conflicts else None
        for x in vs if vs is not None else (v,):
            j = first.setdefault(x, i)
            if j != i:
                last[x] = i
                d = dups.get(x)
                if d is None:
                    dups[x] = d = [offsets[j]]
                d.append(offsets[i])
    return KeyOrder(
        offsets=offsets,
        values=values,
        index_of_offset=index_of_offset,
        first_index=first,
        last_index=last,
        dups=dups,
        conflicts=conflicts,
    )

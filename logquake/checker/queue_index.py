"""One pass over a queue history: the indexes every queue analysis reads.

The queue analyses (queue.py) never walk raw ops; they read this index, built once:
each client op of f send/poll/txn as a `Txn` (its sends and reads, parsed once), the
per-process sequence of those and of assign/subscribe ops, writer-of, the values read
by ok ops, and the version order of every key.

The version order of a key is built, as in Jepsen, from every poll (ok, info and fail:
a poll shows what the log held whatever became of its transaction) plus the sends of ops
that must have committed (ok, or info with a value read by an ok op). Offsets are then
renumbered densely, so the offsets that transaction markers take are not gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from logquake.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op

QUEUE_FS = frozenset({"send", "poll", "txn"})
SUB_FS = frozenset({"assign", "subscribe"})
INF = float("inf")
_first, _second = itemgetter(0), itemgetter(1)


class Txn:
    """A completed (or never completed) send/poll/txn op, parsed.

    `sends` is [(key, value, offset or None)] in op order; `reads` maps a key to the
    [offset, value] pairs polled, in order, across all poll micro-ops of the op.
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

    @property
    def is_node(self) -> bool:
        """Takes part in the dependency graph: it happened (ok) or may have (info)."""
        return self.type != FAIL


def key_of(k: Any) -> Any:
    """Poll results key by decimal strings (JSON object keys), sends by integers."""
    if type(k) is str:
        try:
            return int(k)
        except ValueError:
            return k
    return k


def parse_mops(value: Any) -> tuple[list, dict]:
    """(sends, reads) of an op's micro-ops; unfinished micro-ops carry no result."""
    sends: list = []
    reads: dict = {}
    if not isinstance(value, list):
        return sends, reads
    for mop in value:
        f = mop[0]
        if f == "send":
            k = key_of(mop[1])
            x = mop[2] if len(mop) > 2 else None
            if type(x) is list:
                sends.append((k, x[1], x[0]))
            else:
                sends.append((k, x, None))
        elif f == "poll" and len(mop) > 1 and mop[1]:
            for ks, pairs in mop[1].items():
                k = key_of(ks)
                got = reads.get(k)
                if got is None:
                    reads[k] = list(pairs)
                else:
                    got.extend(pairs)
    return sends, reads


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
    reads_ok: dict[Any, set] = field(default_factory=dict)
    failed_writes: dict[Any, set] = field(default_factory=dict)
    orders: dict[Any, KeyOrder] = field(default_factory=dict)
    client_ops: int = 0

    def writer(self, k: Any, v: Any) -> Txn | None:
        w = self.writer_of.get(k)
        return None if w is None else w.get(v)


def build_index(ops: list[Op]) -> QueueIndex:
    """Index a history (completion order, as recorded)."""
    ix = QueueIndex()
    in_flight: dict[Any, Op] = {}
    txns = ix.txns
    events = ix.events
    for op in ops:
        p = op.process
        if p == NEMESIS:
            continue
        ix.client_ops += 1
        if op.type == INVOKE:
            in_flight[p] = op
            continue
        inv = in_flight.pop(p, None)
        f = op.f
        if f in QUEUE_FS:
            value = op.value if op.value is not None else (inv.value if inv is not None else None)
            sends, reads = parse_mops(value)
            t = Txn(len(txns), op, inv, sends, reads)
            txns.append(t)
            events.append(t)
        elif f in SUB_FS and op.type in (OK, INFO):
            events.append(op)
    # An op that never completed is indeterminate: Jepsen reads it as info.
    for inv in in_flight.values():
        if inv.f in QUEUE_FS:
            sends, reads = parse_mops(inv.value)
            comp = Op(
                index=inv.index,
                time=inv.time,
                process=inv.process,
                type=INFO,
                f=inv.f,
                value=inv.value,
                extra={"error": "never completed"},
            )
            t = Txn(len(txns), comp, inv, sends, reads)
            txns.append(t)
            events.append(t)
    _writers_and_reads(ix)
    _version_orders(ix)
    return ix


def _writers_and_reads(ix: QueueIndex) -> None:
    writer_of, reads_ok, failed = ix.writer_of, ix.reads_ok, ix.failed_writes
    for t in ix.txns:
        for k, v, _ in t.sends:
            w = writer_of.get(k)
            if w is None:
                writer_of[k] = w = {}
            w[v] = t
            if t.type == FAIL:
                failed.setdefault(k, set()).add(v)
        if t.type == OK:
            for k, pairs in t.reads.items():
                s = reads_ok.get(k)
                if s is None:
                    reads_ok[k] = s = set()
                s.update(map(_second, pairs))
    # Must have committed: ok, or info with a value some ok op read (Jepsen's rule).
    for t in ix.txns:
        if t.type == INFO:
            t.committed = any(v in reads_ok.get(k, ()) for k, v, _ in t.sends)


def _version_orders(ix: QueueIndex) -> None:
    # Gather every (offset, value) of each key in bulk, then let dict/set (C code) find
    # the log and any offset holding two values: this is the hottest loop of the checker.
    pairs_of: dict[Any, list] = {}
    for t in ix.txns:
        for k, pairs in t.reads.items():
            got = pairs_of.get(k)
            if got is None:
                pairs_of[k] = got = []
            got.extend(pairs)
        if t.committed:
            for k, v, o in t.sends:
                if o is not None:
                    got = pairs_of.get(k)
                    if got is None:
                        pairs_of[k] = got = []
                    got.append((o, v))
    for k, allp in pairs_of.items():
        log = dict(allp)
        log.pop(None, None)
        conflicts: dict[int, list] = {}
        # Does every pair agree with the log? One C-level comparison of two lists.
        if list(map(log.get, map(_first, allp))) != list(map(_second, allp)):
            conflicts = _conflicts(allp)
            for o, vs in conflicts.items():
                log[o] = vs[0]
        ix.orders[k] = _key_order(log, conflicts)


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
    values = [log[o] for o in offsets]
    n = len(offsets)
    index_of_offset = dict(zip(offsets, range(n), strict=True))
    if not conflicts and len(set(values)) == n:  # the common case: no duplicates
        first = dict(zip(values, range(n), strict=True))
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

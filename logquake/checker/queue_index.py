"""What the queue analyses read: a history indexed once, by queue_build.build_index.

The analyses never walk raw ops. Each client op of f send/poll/txn is a `Txn` (its sends
and reads, parsed once); beside them the per-process sequence of those and of
assign/subscribe ops, writer-of, the first ok op to read each value, the version order of
every key (`KeyOrder`), each op's reads of each key as arrays (`ReadGroups`: where they
landed in the version order), and the ops' fields as columns (`TxnColumns`).

The version order of a key is built, as in Jepsen, from every poll (ok, info and fail:
a poll shows what the log held whatever became of its transaction) plus the sends of ops
that must have committed (ok, or info with a value read by an ok op). Offsets are then
renumbered densely, so the offsets that transaction markers take are not gaps.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from logquake.checker.queue_pairs import Pairs
from logquake.history import FAIL, INFO, OK, Op

QUEUE_FS = frozenset({"send", "poll", "txn"})
SUB_FS = frozenset({"assign", "subscribe"})
INF = float("inf")


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


class StoredTxn:
    """A Txn of a history checked from its file (build_index(slim=True)): the same
    attributes, with `op`, `sends`, `reads`, `inv_index`, `inv_time` and `comp_index` read
    from its TxnTable when asked. A Txn, its op, its sends' tuples and its reads' LazyReads
    held ~700 bytes an op; this holds ~110. (A Txn is one object per op: `w is t` tells
    ops apart.)"""

    __slots__ = ("id", "type", "process", "committed", "table")

    def __init__(self, id: int, type: str, process: Any, table: TxnTable) -> None:
        self.id = id
        self.type = type
        self.process = process
        self.committed = type == OK
        self.table = table

    @property
    def sends(self) -> list:
        """[(key, value, offset or None)] in op order, as Txn.sends."""
        tab, i = self.table, self.id
        a = tab.s_start[i]
        b = tab.s_start[i + 1] if i + 1 < len(tab.s_start) else len(tab.s_key)
        if a == b:
            return NO_SENDS
        keys = tab.s_keys
        return [(keys[k], v, None if o < 0 else o)
                for k, v, o in zip(tab.s_key[a:b], tab.s_value[a:b], tab.s_offset[a:b], strict=True)]

    @property
    def op(self) -> Op:
        """The completion (an info op made up for one that never completed), without its
        value: the op only names itself in examples."""
        tab, i = self.table, self.id
        extra = tab.extra.get(i)
        return Op(index=tab.index[i], time=tab.time[i], process=self.process, type=self.type,
                  f=_FS[tab.f[i]], extra=dict(extra) if extra else {})

    @property
    def reads(self) -> Any:
        r, i = self.table.reads, self.id
        return LazyReads(r, i) if r.op_start[i + 1] > r.op_start[i] else NO_READS

    @property
    def inv_index(self) -> int:
        return self.table.inv_index[self.id]

    @property
    def inv_time(self) -> int:
        return self.table.inv_time[self.id]

    @property
    def comp_index(self) -> float:
        return INF if self.type == INFO else self.table.index[self.id]

    is_node = Txn.is_node


_FS = ("send", "poll", "txn")
F_CODE = {f: i for i, f in enumerate(_FS)}
# An op's sends and reads when it has none (shared: never added to).
NO_SENDS: list = []
NO_READS: dict = {}


class TxnTable:
    """The fields of a history's StoredTxns, by op id: array("q") columns (each read as a
    Python int, ~40 ns), f as a code of _FS, the extra fields of the ops that have any,
    and where each op's reads lie (OpReads). Sends, in op order, as columns of their own
    (key number, value, offset or -1): op i's from s_start[i] on."""

    __slots__ = ("index", "time", "inv_index", "inv_time", "f", "extra", "reads",
                 "s_start", "s_key", "s_value", "s_offset", "s_keys", "_s_key_no")

    def __init__(self) -> None:
        self.index, self.time, self.inv_index, self.inv_time = array("q"), array("q"), array("q"), array("q")
        self.f = array("b")
        self.extra: dict[int, dict] = {}
        self.reads = OpReads()
        self.s_start, self.s_key, self.s_value, self.s_offset = array("q"), array("q"), array("q"), array("q")
        self.s_keys: list = []  # key number -> key
        self._s_key_no: dict = {}

    def add_send(self, k: Any, v: Any, o: Any) -> bool:
        """A send of the op added last; False (nothing added) unless its value is a 64-bit
        integer and its offset None or one >= 0."""
        if type(v) is not int or not (o is None or (type(o) is int and o >= 0)):
            return False
        try:
            self.s_value.append(v)
        except OverflowError:
            return False
        try:
            self.s_offset.append(-1 if o is None else o)
        except OverflowError:
            self.s_value.pop()
            return False
        kn = self._s_key_no.get(k)
        if kn is None:
            kn = self._s_key_no[k] = len(self.s_keys)
            self.s_keys.append(k)
        self.s_key.append(kn)
        return True

    def add(self, op: Op, inv: Op | None) -> None:
        """The next op id's fields (raises TypeError or OverflowError unless its index and
        times are 64-bit integers)."""
        self.index.append(op.index)
        self.time.append(op.time)
        self.inv_index.append(op.index if inv is None else inv.index)
        self.inv_time.append(op.time if inv is None else inv.time)
        self.f.append(F_CODE[op.f])
        self.s_start.append(len(self.s_key))
        if op.extra:
            self.extra[len(self.f) - 1] = op.extra


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
    orders: dict[Any, KeyOrder] | KeyOrders = field(default_factory=dict)  # (KeyOrders: slim)
    client_ops: int = 0
    # The assign/subscribe ops of `events` (ok or info), each as (number of Txns before it, op).
    subs: list[tuple[int, Op]] = field(default_factory=list)
    # Each op's read of each key as arrays, and the ops' fields as columns (build_index
    # sets both; None only while it runs).
    groups: ReadGroups | None = None
    columns: TxnColumns | None = None

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
    sends: np.ndarray  # len(Txn.sends): its send micro-ops, whatever became of the op
    process_no: dict  # process -> its number

@dataclass(frozen=True, slots=True)
class ReadGroups:
    """Each op's read of each key (a group), numbered in op order then in the op's key order.

    Where each group landed in its key's version order is in `first`, `last` and
    `contiguous`; `max` is its highest offset.
    """

    tid: np.ndarray  # the op's id
    key: np.ndarray  # the key's number in `keys`
    keys: list
    last_value: np.ndarray  # the value of its last pair (when `some`)
    some: np.ndarray  # holds at least one pair
    first: np.ndarray  # dense index of its first pair (when `some`)
    last: np.ndarray  # dense index of its last pair (when `some`)
    contiguous: np.ndarray  # its pairs are consecutive entries of the log, in order
    max: np.ndarray  # its highest offset (when `some`; -1 otherwise)
    length: np.ndarray  # its number of pairs
    # key -> (offsets, values, op ids, rank in the op's reads-then-sends) of the sends of
    # ok and info ops that carry an offset, in op order
    sends: dict
    first_reader: dict  # key -> (values some ok op read, sorted; the first such op's id)
    # key -> (values, op ids, ranks) of the sends of ok and info ops without an offset
    bare_sends: dict
    committed: np.ndarray  # by op id: Txn.committed
    logs: dict  # key -> its log (sorted offsets, the value at each); None: an offset holds two


class OpReads:
    """Where each op's reads lie in the one PairStore of a history checked from its file,
    for LazyReads: each group's key number, first pair and length, by op id where its
    groups start (op ids 0..n: one more at the end), the keys, the store's array.
    build_index fills it once the ops are gathered."""

    __slots__ = ("key", "src", "length", "op_start", "keys", "store")

    def __init__(self) -> None:
        self.key = self.src = self.length = self.op_start = None
        self.keys: list = []
        self.store: Any = None

    def of(self, tid: int) -> dict:
        """Op tid's reads, as Txn.reads has them: key -> Pairs, in the op's order of keys."""
        a, b = self.op_start[tid : tid + 2].tolist()
        keys, store = self.keys, self.store
        return {keys[kn]: Pairs(store, at, n) for kn, at, n in
                zip(self.key[a:b].tolist(), self.src[a:b].tolist(), self.length[a:b].tolist(), strict=True)}


class LazyReads(Mapping):
    """An op's reads (Txn.reads) made from OpReads when asked, so that a history checked
    from its file holds no dict per op, nor a Pairs per key (~350 bytes an op). A read-only
    mapping key -> Pairs, in the op's order of keys; `items` is the dict's own (one walk
    over the op's groups, where the mixin's would look each key up again)."""

    __slots__ = ("groups", "tid")

    def __init__(self, groups: OpReads, tid: int) -> None:
        self.groups = groups
        self.tid = tid

    def __getitem__(self, k: Any) -> Pairs:
        g = self.groups
        a, b = g.op_start[self.tid : self.tid + 2].tolist()
        keys = g.keys
        for i, kn in enumerate(g.key[a:b].tolist(), a):
            if keys[kn] == k:
                return Pairs(g.store, int(g.src[i]), int(g.length[i]))
        raise KeyError(k)

    def __iter__(self) -> Iterator:
        return iter(self.groups.of(self.tid))

    def __len__(self) -> int:
        a, b = self.groups.op_start[self.tid : self.tid + 2].tolist()
        return b - a

    def items(self) -> Any:
        return self.groups.of(self.tid).items()

    def __bool__(self) -> bool:
        return True  # (without asking __len__: an op with no reads holds an empty dict instead)

    def __repr__(self) -> str:
        return f"LazyReads({self.groups.of(self.tid)!r})"


class KeyOrders:
    """ix.orders of a history checked from its file: each key's KeyOrder made from its log
    (ReadGroups.logs) when asked, the last _RECENT kept. Held for every key at once they
    were ~150 bytes a log entry (two lists, two dicts and the ints), beside the log's own
    arrays; made again they cost ~0.2 us an entry. A key whose offsets hold two values
    keeps its KeyOrder (made from the ops' reads: rare)."""

    __slots__ = ("_logs", "_kept", "_recent")

    def __init__(self, logs: dict, kept: dict) -> None:
        self._logs = logs  # key -> (offsets, values), or None for a key of `kept`
        self._kept = kept
        self._recent: dict = {}

    def __getitem__(self, k: Any) -> KeyOrder:
        got = self._recent.get(k)
        if got is not None:
            return got
        log = self._logs[k]
        if log is None:
            return self._kept[k]
        got = key_order_sorted(log[0].tolist(), log[1].tolist(), {})
        if len(self._recent) >= _RECENT:
            del self._recent[next(iter(self._recent))]
        self._recent[k] = got
        return got

    def get(self, k: Any, default: Any = None) -> Any:
        return self[k] if k in self._logs else default

    def __contains__(self, k: Any) -> bool:
        return k in self._logs

    def __len__(self) -> int:
        return len(self._logs)

    def __iter__(self) -> Iterator:
        return iter(self._logs)

    def keys(self) -> Any:
        return self._logs.keys()

    def items(self) -> Iterator[tuple[Any, KeyOrder]]:
        return ((k, self[k]) for k in self._logs)

    def values(self) -> Iterator[KeyOrder]:
        return (self[k] for k in self._logs)


_RECENT = 256


def txn_columns(ix: QueueIndex) -> TxnColumns:
    """ix's TxnColumns (build_index makes them)."""
    assert ix.columns is not None, "build_index sets the columns"
    return ix.columns


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


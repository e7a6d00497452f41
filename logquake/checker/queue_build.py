"""build_index: a queue history indexed once, in one loop over the ops and numpy passes.

One loop over the ops (_gather) parses each op's micro-ops (Txn) and collects every read
and send. A history's reads are millions of small [offset, value] lists; walking them in
Python, even through C helpers (map, zip, dict), touches each several times across a
heap of gigabytes. So they are copied once, in op order, into one int64 array (offsets
and values interleaved), split by key with one gather, and the first reader of each
value, the version order and where each op's reads land in it (`ReadGroups`) are
computed as whole-array operations.

That needs every offset to be an integer >= 0 and every value a 64-bit integer, which is
what Kafka clients and Jepsen's queue workload record. A history with anything else
(a read without an offset, a string value, ...) is refused with a ValueError naming the
first op that holds it: the verdict is then unknown, which is honest, where placing such
reads by guesswork would not be.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from logquake.checker.queue_index import (
    INF,
    NO_READS,
    NO_SENDS,
    QUEUE_FS,
    SUB_FS,
    KeyOrders,
    OpReads,
    QueueIndex,
    ReadGroups,
    StoredTxn,
    Txn,
    TxnColumns,
    TxnTable,
    key_of,
    key_order_sorted,
)
from logquake.checker.queue_pairs import Pairs, joined
from logquake.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op

# Shared by ops without sends / without reads (never added to): half a million empty
# containers a 1M-op history would otherwise keep, each a fresh page touched.
_NO_SENDS, _NO_READS = NO_SENDS, NO_READS
_I64 = np.int64


def build_index(ops: Iterable[Op], *, slim: bool = False) -> QueueIndex:
    """Index a history (completion order, as recorded).

    `slim`: the ops are read for this alone, their polls' pairs views into one PairStore
    (queue_stream.indexed_ops): each op becomes a StoredTxn, its fields columns of a
    TxnTable and its reads where they lie in the store (LazyReads when asked), not a dict
    of views; raises NotSlim at a read that is no such view (or an index or time that is
    not a 64-bit integer).
    Raises ValueError naming the op when some read or send does not fit the arrays (see
    the module docstring); TypeError or OverflowError when an op's index or time is not
    a 64-bit integer (the history format's rule).
    """
    ix = QueueIndex()
    gathered = _gather(ix, ops, slim)
    if not _index_arrays(ix, gathered):
        if slim:  # (_misfit reads the Txns' reads, which are then nowhere)
            raise NotSlim
        raise ValueError(_misfit(ix))
    return ix


def _misfit(ix: QueueIndex) -> str:
    """Why the arrays refused this history: the first op holding a read or send that does
    not fit them, named."""
    for t in ix.txns:
        where = f"op {t.op.index} (process {t.process})"
        for k, pairs in t.reads.items():
            for p in pairs:
                if not isinstance(p, (list, tuple)) or len(p) != 2:
                    return f"{where} polled key {k!r}: {p!r} is not an [offset, value] pair"
                if not _offset(p[0]):
                    return f"{where} polled key {k!r}: {p!r} has no offset (an integer >= 0) to place it by"
                if not _int64(p[1]):
                    return f"{where} polled key {k!r}: value {p[1]!r} is not a 64-bit integer"
        for k, v, o in t.sends if t.type != FAIL else ():  # (a failed op's sends are not gathered)
            if not (o is None or _offset(o)):
                return f"{where} sent to key {k!r}: offset {o!r} is not an integer >= 0"
            if not _int64(v):
                return f"{where} sent to key {k!r}: value {v!r} is not a 64-bit integer"
    return "some read or send is not a pair of 64-bit integers"


def _offset(o: Any) -> bool:
    return type(o) is int and 0 <= o < 2**63


def _int64(v: Any) -> bool:
    return isinstance(v, int) and -(2**63) <= v < 2**63


class NotSlim(Exception):
    """build_index(slim=True) met a read that is not a view into the one PairStore."""


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
    # slim: where each group's first pair lies in the store, instead of read_lists
    slim: OpReads | None = None
    src: array = field(default_factory=lambda: array("q"))
    lens: array = field(default_factory=lambda: array("q"))  # each group's number of pairs


def _gather(ix: QueueIndex, ops: Iterable[Op], slim: bool) -> Gathered:
    """The one loop over the ops: txns, events, writers, and every key's reads and sends."""
    in_flight: dict[Any, Op] = {}
    keys: dict = {}
    txns, events, writer_of, failed = ix.txns, ix.events, ix.writer_of, ix.failed_writes
    table = TxnTable() if slim else None
    gather = Gathered(slim=table.reads if table is not None else None)
    client = 0
    # Columns for txn_columns, made while each op is at hand: numbers, not references to
    # the ops' int objects, which read back at the end are cold memory (lists of them were
    # ~0.9 s of a 1M-op history's index, ~400 ns a number). With a table, its own are read
    # instead of the four time and index columns.
    c_kind = array("b")  # _KIND[type] + 1 if f is send
    c_time, c_inv, c_index, c_inv_index = array("q"), array("q"), array("q"), array("q")  # (index: the completion's)
    c_proc = array("q")  # numbered in order of appearance
    c_sends = array("q")  # its number of sends (with a table: its own s_start says)
    proc_no: dict[Any, int] = {}
    unfinished: list[Op] = []
    for op in chain(ops, _never_completed(in_flight, unfinished)):
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
            t = _txn(len(txns), op, inv, table)
            _parse(t, value, keys, gather, writer_of, failed)
            txns.append(t)
            events.append(t)
            c_kind.append(_KIND[typ] + (f == "send"))
            if table is None:
                c_time.append(op.time)
                c_inv.append(t.inv_time)
                c_index.append(op.index)
                c_inv_index.append(t.inv_index)
                c_sends.append(len(t.sends))
            pn = proc_no.get(p)
            if pn is None:
                pn = proc_no[p] = len(proc_no)
            c_proc.append(pn)
        elif f in SUB_FS and (typ == OK or typ == INFO):
            events.append(op)
            ix.subs.append((len(txns), op))
    ix.client_ops = client - len(unfinished)  # (what the history holds, not the made-up ends)
    if table is not None:
        c_time, c_inv, c_index, c_inv_index = table.time, table.inv_time, table.index, table.inv_index
        c_sends = np.diff(np.append(np.array(table.s_start, dtype=_I64), len(table.s_key)))
    ix.columns = _columns(c_kind, c_time, c_inv, c_index, c_inv_index, c_proc, c_sends, proc_no)
    return gather


def _never_completed(in_flight: dict[Any, Op], made: list[Op]) -> Iterator[Op]:
    """Once the history is read, a completion for each send/poll/txn op that never had one:
    it is indeterminate, and Jepsen reads it as info. Each is added to `made`; the
    invocation stays in `in_flight`, to be paired with it like any other."""
    made += [
        Op(index=inv.index, time=inv.time, process=inv.process, type=INFO, f=inv.f, value=inv.value,
           extra={"error": "never completed"})
        for inv in in_flight.values()
        if inv.f in QUEUE_FS
    ]
    yield from made


def _txn(tid: int, op: Op, inv: Op | None, table: TxnTable | None) -> Txn | StoredTxn:
    """Op tid's Txn, or with a table its StoredTxn (its fields added to the table)."""
    if table is None:
        return Txn(tid, op, inv, _NO_SENDS, _NO_READS)
    try:
        table.add(op, inv)
    except (TypeError, OverflowError):
        raise NotSlim from None
    return StoredTxn(tid, op.type, op.process, table)


def _column(x: array, dtype: type) -> np.ndarray:
    """A column from (a copy of) an array("q")."""
    return np.array(x, dtype=dtype)


_KIND = {OK: 0, FAIL: 2, INFO: 4}  # (+ 1 for f send) txn_columns decodes these


def _columns(kinds: array, times: array, invs: array, index: array, inv_index: array, procs: array,
             sends: array | np.ndarray, proc_no: dict) -> TxnColumns:
    """The TxnColumns from the arrays _gather filled."""
    kind = np.array(kinds, dtype=np.int8)
    return TxnColumns(
        ok=kind >> 1 == 0,
        fail=kind >> 1 == 1,
        info=kind >> 1 == 2,
        step=kind == 0,
        time=_column(times, np.int64),
        inv_time=_column(invs, np.int64),
        inv_index=_column(inv_index, np.float64),
        comp_index=np.where(kind >> 1 == 2, INF, _column(index, np.float64)),
        process=np.array(procs, dtype=np.int64),
        sends=np.array(sends, dtype=np.int64),
        process_no=proc_no,
    )


def _parse(t: Txn, value: Any, keys: dict, g: Gathered, writer_of: dict, failed: dict) -> None:
    """Set t.sends and t.reads from its micro-ops (unfinished ones carry no result), and
    gather them into g, writer_of and failed in the same loop.

    A key's read pairs are the op's own list when one poll read it (no copy: the reads
    are most of a history's memory), a new list when several did; with g.slim, where
    they lie in the store instead (t.reads a LazyReads). `keys` caches key_of.
    Sends are gathered with their place among the op's sends: _arrays adds the number of
    the op's reads to make it the rank among reads-then-sends, known only at the end.
    """
    if not isinstance(value, list):
        return
    tid, typ = t.id, t.type
    sends: list = []
    reads: dict = {}
    lists, g_key, g_tid, key_no, first_at = g.read_lists, g.group_key, g.group_tid, g.key_no, g.first_at
    slim = g.slim
    base = len(g_tid)
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
            if slim is not None and not t.table.add_send(k, v, o):
                raise NotSlim
            w = writer_of.get(k)
            if w is None:
                writer_of[k] = w = {}
            w[v] = t
            if typ == FAIL:
                failed.setdefault(k, set()).add(v)
                continue
            if o is None:
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
                    at = base + list(reads).index(k)
                    reads[k] = both = joined(got, pairs)
                    if slim is None:
                        lists[at] = both
                        g.lens[at] = len(both)
                    elif type(both) is not Pairs:
                        raise NotSlim
                    else:
                        g.src[at], g.lens[at] = both.start, both.n
                    continue
                reads[k] = pairs
                n = key_no.get(k)
                if n is None:
                    n = key_no[k] = len(key_no)
                    first_at.setdefault(k, (tid, len(reads) - 1))
                if slim is None:
                    lists.append(pairs)
                    g.lens.append(len(pairs))  # (now, while the list is in the cache)
                elif type(pairs) is not Pairs or (slim.store is not None and pairs.store is not slim.store):
                    raise NotSlim
                else:
                    slim.store = pairs.store
                    g.src.append(pairs.start)
                    g.lens.append(pairs.n)
                g_key.append(n)
                g_tid.append(tid)
    if new_keys:  # reads rank before sends, whatever the order of the micro-ops
        for k, place in new_keys:
            first_at.setdefault(k, (tid, len(reads) + place))
    if slim is None:  # (a StoredTxn's are read from its table)
        t.sends = sends or _NO_SENDS
        t.reads = reads or _NO_READS


class _NotInts(Exception):
    """Some read or send does not fit the int64 arrays, or has a negative offset."""


def _index_arrays(ix: QueueIndex, gathered: Gathered) -> bool:
    """Fill ix.reads_ok, ix.orders, Txn.committed and ix.groups; False if not all ints >= 0.

    ix holds the txns _gather made, `gathered` what it collected.
    """
    try:
        per_key, sends, g_tid_a, g_len_a, bare_sends, g_src = _arrays(gathered, len(ix.txns))
    except _NotInts:
        return False
    slim = gathered.slim
    if slim is not None:  # (before the Txns' reads are first asked for, below)
        slim.key, slim.src, slim.length = np.asarray(gathered.group_key, dtype=_I64), g_src, g_len_a
        slim.keys = list(gathered.key_no)
        slim.op_start = np.searchsorted(g_tid_a, np.arange(len(ix.txns) + 1))
    first_at = gathered.first_at
    cols = ix.columns
    ok_t = cols.ok
    first_reader = _first_readers(ix, per_key, ok_t)
    committed = ok_t.copy()
    committed[_commit_info(ix, first_at, np.flatnonzero(cols.info).tolist())] = True
    keys = sorted(first_at, key=first_at.__getitem__)
    groups = _Groups(len(g_len_a))
    # per_key's keys are gathered.key_no's, in its order (and popped as they are placed)
    logs = _version_orders(ix, keys, per_key, sends, committed, groups, gathered.key_no, lazy=slim is not None)
    if slim is not None:  # each key's KeyOrder made from its log when asked
        ix.orders = KeyOrders(logs, {k: ix.orders[k] for k, log in logs.items() if log is None})
    ix.groups = ReadGroups(
        tid=g_tid_a,
        key=groups.key,
        keys=list(gathered.key_no),
        last_value=groups.last_value,
        some=groups.some,
        first=groups.first,
        last=groups.last,
        contiguous=groups.contiguous,
        max=groups.max,
        length=g_len_a,
        sends=sends,
        first_reader=first_reader,
        bare_sends=bare_sends,
        committed=committed,
        logs=logs,
    )
    if slim is not None:  # the same numbers as groups.key: one array; src in 32 bits if it fits
        if np.array_equal(slim.key, groups.key):
            slim.key = groups.key
        if len(g_src) and int(g_src.max()) < 2**31:
            slim.src = g_src.astype(np.int32)
    return True


def _arrays(g: Gathered, n_txns: int) -> tuple:
    """What _gather collected, as int64 arrays: each key's reads (see _by_key), the sends
    per key as (offsets, values, op ids, ranks), the op id and length of each group, and
    the sends without an offset per key as (values, op ids, ranks), and the pair each group
    starts at in the reads' one array.

    A send's rank is its place among the op's reads then sends (the order of Txn.reads,
    then Txn.sends): its place among the sends after as many as the op's reads.
    """
    lists = g.read_lists
    g_len = np.array(g.lens, dtype=_I64)
    g_tid = np.asarray(g.group_tid, dtype=_I64)
    n_reads = np.bincount(g_tid, minlength=n_txns)  # an op's groups: one per key it read

    def op_ids_and_ranks(tids: list, places: list) -> tuple[np.ndarray, np.ndarray]:
        t = np.asarray(tids, dtype=_I64)
        return t, np.asarray(places, dtype=_I64) + n_reads[t]

    try:
        flat, g_src = _slim_reads(g) if g.slim is not None else _flat_reads(lists, g_len)
        sends = {
            k: (np.frombuffer(array("q", o), dtype=_I64), np.frombuffer(array("q", v), dtype=_I64))
            + op_ids_and_ranks(tids, places)
            for k, (o, v, tids, places) in g.sends.items()
        }
    except (TypeError, OverflowError, ValueError):
        raise _NotInts from None
    if any(s[0].min() < 0 for s in sends.values()):
        raise _NotInts
    try:
        bare = {
            k: (np.frombuffer(array("q", v), dtype=_I64), *op_ids_and_ranks(t, places))
            for k, (v, t, places) in g.bare_sends.items()
        }
    except (TypeError, OverflowError):
        raise _NotInts from None
    per_key = _by_key(flat, g_src, np.asarray(g.group_key, dtype=_I64), g_len, g_tid, list(g.key_no))
    return per_key, sends, g_tid, g_len, bare, g_src


def _by_key(
    flat: np.ndarray, g_src: np.ndarray, g_key: np.ndarray, g_len: np.ndarray, g_tid: np.ndarray, keys: list
) -> _PerKey:
    """Every group's pairs (in `flat`, from pair g_src[group] on) split by key: k -> (offsets,
    values, group ids, group lengths, op id of each group), each key's groups in op order."""
    return _PerKey(flat, g_src, g_key, g_len, g_tid, keys)


class _PerKey:
    """_by_key's mapping, each key's arrays made when asked: a copy of every pair's offset
    and value at once (with the index gathering them) was this stage's peak, ~3x the pairs'
    16 bytes beyond the store's own (200 MiB at 1M ops); one key's at a time is small."""

    def __init__(self, flat: np.ndarray, g_src: np.ndarray, g_key: np.ndarray, g_len: np.ndarray,
                 g_tid: np.ndarray, keys: list) -> None:
        self.offs, self.vals = flat[0::2], flat[1::2]
        self.g_src, self.g_tid = g_src, g_tid
        self.gids = np.argsort(g_key, kind="stable")  # by key, then in op order
        self.lens = g_len[self.gids]
        g_end = np.cumsum(np.bincount(g_key, minlength=len(keys)))
        ends = g_end.tolist()
        self.bounds = list(zip([0, *ends], ends, strict=False))  # (each key: from the last one's end)
        self.at = {k: i for i, k in enumerate(keys)}
        self.keys = keys

    def _arrays(self, i: int) -> tuple:
        g0, g1 = self.bounds[i]
        ids, lens = self.gids[g0:g1], self.lens[g0:g1]
        ends = np.cumsum(lens)
        total = int(ends[-1]) if len(ends) else 0
        at = np.repeat(self.g_src[ids] - (ends - lens), lens) + np.arange(total, dtype=_I64)
        # (int64 whatever the store's width: what the analyses get is the same)
        return self.offs[at].astype(_I64, copy=False), self.vals[at].astype(_I64, copy=False), ids, lens, self.g_tid[ids]

    def items(self) -> Iterator[tuple[Any, tuple]]:
        for i, k in enumerate(self.keys):
            yield k, self._arrays(i)

    def pop(self, k: Any, default: Any = None) -> Any:
        i = self.at.pop(k, None)
        return default if i is None else self._arrays(i)


def _flat_reads(lists: list, g_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every group's pairs in one int64 array (offset, value, offset, ...), and the pair each
    group starts at. Groups that are all views of one PairStore are read where they lie
    (no copy); else the pairs are copied, in group order.

    Raises _NotInts unless every pair is [offset, value] with an offset >= 0.
    """
    if lists and set(map(type, lists)) == {Pairs} and len(set(map(id, map(_store, lists)))) == 1:
        flat = lists[0].store.array()
        if flat[0::2].min() < 0:
            raise _NotInts
        return flat, np.fromiter(map(_start, lists), dtype=_I64, count=len(lists))
    # In op order, the order the pairs lie in memory: per key it was 1.5x slower.
    return _flatten(lists, 2 * int(g_len.sum())), np.cumsum(g_len) - g_len


_start, _store = attrgetter("start"), attrgetter("store")


def _slim_reads(g: Gathered) -> tuple[np.ndarray, np.ndarray]:
    """_flat_reads of a slim gathering: the store's array itself, where each group starts."""
    flat = g.slim.store.array() if g.slim.store is not None else np.zeros(0, dtype=_I64)
    if len(flat) and flat[0::2].min() < 0:
        raise _NotInts
    return flat, np.array(g.src, dtype=_I64)


def _flatten(lists: list[list], n: int) -> np.ndarray:
    """Read lists as one int64 array of n items: offset, value, offset, ...

    Allocated once at its size (no list in between: fresh memory is what costs here);
    raises _NotInts unless every pair is [offset, value] with an offset >= 0.
    """
    items = chain.from_iterable(chain.from_iterable(lists))
    a = np.fromiter(items, dtype=_I64, count=n)  # ValueError when there are fewer
    if next(items, None) is not None or (n and a[0::2].min() < 0):  # more items, or see _NotInts
        raise _NotInts
    return a


def _compact(a: np.ndarray) -> bool:
    """Whether a's values span so few integers that a table over them beats sorting a."""
    return len(a) > 0 and int(a.max()) - int(a.min()) < 4 * len(a) + 1024


def _first_of_each(v: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of v, sorted, and for each the t at its first occurrence (t ascending)."""
    if _compact(v):  # values of a key are mostly a run of integers: a table, no sort
        lo = int(v.min())
        none = np.iinfo(_I64).max
        first = np.full(int(v.max()) - lo + 1, none, dtype=_I64)
        np.minimum.at(first, v - lo, t)  # t ascending: the least is the first
        at = np.flatnonzero(first != none)
        return at + lo, first[at]
    v, t, first = _by_first(v, t)
    return v[first], t[first]


def _log_of(offs: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
    """A key's log from every (offset, value) seen: its sorted distinct offsets, the value
    first seen at each, each pair's dense index (None when sorted instead), and whether some
    offset holds two values."""
    if _compact(offs):  # offsets of a key are a run of integers: a table, no sort
        lo = int(offs.min())
        n = len(offs)
        first = np.full(int(offs.max()) - lo + 1, n, dtype=_I64)
        at = offs - lo
        np.minimum.at(first, at, np.arange(n, dtype=_I64))
        held = first < n
        first_values = vals[first[held]]
        dense = (np.cumsum(held) - 1)[at]
        return np.flatnonzero(held) + lo, first_values, dense, bool((vals != first_values[dense]).any())
    so, sv, new = _by_first(offs, vals)
    two = bool((~new[1:] & (sv[1:] != sv[:-1])).any())
    return so[new], sv[new], None, two


def _by_first(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a and b ordered by a (stably: equal a keep their order) and where each run of equal a starts."""
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    starts = np.empty(len(a), dtype=bool)
    if len(a):
        starts[0] = True
        np.not_equal(a[1:], a[:-1], out=starts[1:])
    return a, b, starts


def _first_readers(ix: QueueIndex, per_key: _PerKey, ok_t: np.ndarray) -> dict:
    """reads_ok: key -> value -> id of the first ok op that read it; keys in first-read order.

    Returns the same as arrays: key -> (the values, sorted; the id of each one's reader).
    """
    reads_ok: dict[Any, dict] = {}
    arrays: dict[Any, tuple] = {}
    op_id = [t.id for t in ix.txns].__getitem__  # the ids' own int objects, not a copy per value
    for k, (_, vals, _, lens, g_tids) in per_key.items():
        # Keys some ok op read, even an empty list of pairs.
        if not ok_t[g_tids].any():
            continue
        tids = np.repeat(g_tids, lens)
        okp = ok_t[tids]
        arrays[k] = v, t = _first_of_each(vals[okp], tids[okp])
        reads_ok[k] = dict(zip(v.tolist(), map(op_id, t.tolist()), strict=True))
    txns = ix.txns
    first = {k: min(d.values(), default=len(txns)) for k, d in reads_ok.items()}
    order = sorted(reads_ok, key=lambda k: (first[k], _rank(txns, first[k], k)))
    ix.reads_ok = {k: reads_ok[k] for k in order}
    return arrays


def _commit_info(ix: QueueIndex, first_at: dict, info: list[int]) -> list[int]:
    """Must have committed: ok, or info with a value some ok op read (Jepsen's rule).

    `info` is the ids of the info ops; returns those that committed.
    """
    reads_ok, txns = ix.reads_ok, ix.txns
    done = []
    for tid in info:
        t = txns[tid]
        t.committed = any(v in reads_ok.get(k, ()) for k, v, _ in t.sends)
        if not t.committed:
            continue
        done.append(tid)
        for r, (k, _, o) in enumerate(t.sends, len(t.reads)):
            if o is None:
                continue
            at = first_at.get(k)
            if at is None or (t.id, r) < at:
                first_at[k] = (t.id, r)
    return done


def _version_orders(
    ix: QueueIndex,
    keys: list,
    per_key: _PerKey,
    sends: dict,
    committed: np.ndarray,
    groups: _Groups,
    key_no: dict,
    *,
    lazy: bool = False,
) -> dict:
    """ix.orders from every read and committed send; each key's reads then placed in it.
    (`lazy`: a KeyOrder is made only for a key where an offset holds two values.)

    Returns each key's log as arrays (sorted offsets, the value at each), None for a key
    where an offset holds two values.
    """
    empty = np.zeros(0, dtype=_I64)
    unique: dict[Any, np.ndarray] = {}
    logs: dict[Any, tuple | None] = {}
    mixed: list = []
    for k in keys:
        reads = per_key.pop(k, None)
        ro, rv = reads[:2] if reads is not None else (empty, empty)
        s = sends.get(k)
        if s is not None:
            keep = committed[np.asarray(s[2], dtype=_I64)]
            offs, vals = np.concatenate((ro, s[0][keep])), np.concatenate((rv, s[1][keep]))
        else:
            offs, vals = ro, rv
        uo, first_values, dense, two = _log_of(offs, vals)
        unique[k] = uo
        if reads is not None:
            groups.place(uo, ro, rv, reads[2], reads[3], key_no[k], None if dense is None else dense[: len(ro)])
        if two:  # an offset holding two values
            mixed.append(k)
            ix.orders[k] = None  # placeholder: keeps the key order
            logs[k] = None
            continue
        logs[k] = (uo, first_values)
        ix.orders[k] = None if lazy else key_order_sorted(uo.tolist(), first_values.tolist(), {})
    if mixed:
        # Each offset's values in the order first seen, op by op.
        ordered = _pairs_in_order(ix, mixed)
        for k in mixed:
            conflicts = _conflicts(ordered[k])
            log = dict(ordered[k])
            log.update((o, vs[0]) for o, vs in conflicts.items())
            offsets = unique[k].tolist()
            ix.orders[k] = key_order_sorted(offsets, [log[o] for o in offsets], conflicts)
    return logs


class _Groups:
    """Where each group (one op's reads of one key) landed in its key's version order,
    per key as array operations."""

    def __init__(self, n: int) -> None:
        self.first = np.zeros(n, dtype=_I64)  # dense index of the first pair
        self.last = np.zeros(n, dtype=_I64)
        self.contiguous = np.zeros(n, dtype=bool)
        self.max = np.full(n, -1, dtype=_I64)  # highest offset
        self.some = np.zeros(n, dtype=bool)  # holds a pair at all
        self.key = np.zeros(n, dtype=_I64)  # the key's number (in ReadGroups.keys)
        self.last_value = np.zeros(n, dtype=_I64)

    def place(
        self,
        unique: np.ndarray,
        offs: np.ndarray,
        vals: np.ndarray,
        gids: np.ndarray,
        lens: np.ndarray,
        key: int,
        dense: np.ndarray | None = None,
    ) -> None:
        """One key's groups; `unique` is its log's sorted offsets, `offs` every read offset
        (`dense`: each one's index in `unique`, if known)."""
        self.key[gids] = key
        if not len(offs):
            return
        if dense is None:
            dense = np.searchsorted(unique, offs)
        some = lens > 0
        lens = lens[some]
        ends = np.cumsum(lens)
        starts = ends - lens
        ends -= 1
        bad = np.zeros(len(offs), dtype=_I64)
        np.not_equal(dense[1:] - dense[:-1], 1, out=bad[1:], casting="unsafe")
        bad = np.cumsum(bad)  # bad[j]: steps other than +1 up to pair j
        gs = gids[some]
        self.some[gs] = True
        self.first[gs] = dense[starts]
        self.last[gs] = dense[ends]
        self.contiguous[gs] = bad[ends] == bad[starts]
        self.max[gs] = np.maximum.reduceat(offs, starts)
        self.last_value[gs] = vals[ends]


def _rank(txns: list[Txn], tid: int, k: Any) -> int:
    return list(txns[tid].reads).index(k) if tid < len(txns) else 0


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

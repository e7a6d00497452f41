"""build_index's passes over every read, done as numpy passes over flat per-key arrays.

A history's reads are millions of small [offset, value] lists. Walking them in Python,
even through C helpers (map, zip, dict), touches each several times across a heap of
gigabytes. Here each key's reads are copied once into one int64 array (offsets and
values interleaved, in op order, one group per op that read the key), and the first
reader of each value, the version order and where each op's reads land in it are
computed as whole-array operations. What they produce is exactly what the general path
of queue_index.py produces; that path still runs when some offset or value is not a
64-bit integer (array('q') refuses None, strings, floats and huge ints alike) or some
offset is negative.

This path leaves Txn.pos and Txn.max_read unset: the analyses that read where each read
landed (int-poll, process order, realtime lag) take it from `ReadGroups` as arrays.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from logquake.checker.queue_index import (
    OK,
    QueueIndex,
    _conflicts,
    _pairs_in_order,
    _rank,
    key_order_sorted,
    txn_columns,
)
from logquake.history import FAIL

_I64 = np.int64


class _NotInts(Exception):
    """Some read or send does not fit the int64 arrays, or has a negative offset (the
    realtime lag indexes by offset, and Python lists read a negative index from the end):
    use the general path."""


def flat_index(ix: QueueIndex) -> bool:
    """Fill ix.reads_ok, ix.orders, Txn.committed and ix.groups; False if not all ints >= 0.

    ix holds the gathered txns (queue_index._gather without pairs). On False nothing in
    ix was changed that the general path does not set again.
    """
    try:
        reads, sends, first_at, g_tid, g_len, bare, bare_sends = _collect(ix)
    except _NotInts:
        return False
    cols = txn_columns(ix)
    ok_t = cols.ok
    g_tid_a = np.asarray(g_tid, dtype=_I64)
    g_len_a = np.asarray(g_len, dtype=_I64)
    per_key = {}  # k -> (offsets, values, group ids, group lengths, op id of each group)
    for k, (flat, gids) in reads.items():
        gids_a = np.asarray(gids, dtype=_I64)
        per_key[k] = (flat[0::2], flat[1::2], gids_a, g_len_a[gids_a], g_tid_a[gids_a])
    del reads  # the arrays live on in per_key, which frees each key's once it is placed
    per_key_order = list(per_key)
    first_reader = _first_readers(ix, per_key, ok_t)
    committed = ok_t.copy()
    committed[_commit_info(ix, first_at, np.flatnonzero(cols.info).tolist())] = True
    keys = sorted(first_at, key=first_at.__getitem__)
    groups = _Groups(len(g_len))
    key_no = {k: i for i, k in enumerate(per_key_order)}
    logs = _version_orders(ix, keys, per_key, sends, committed, groups, key_no)
    ix.groups = ReadGroups(
        tid=g_tid_a,
        key=groups.key,
        keys=list(per_key_order),
        last_value=groups.last_value,
        some=groups.some,
        first=groups.first,
        last=groups.last,
        contiguous=groups.contiguous,
        max=groups.max,
        length=g_len_a,
        sends=sends,
        ok_sends_placed=bare == 0,
        first_reader=first_reader,
        bare_sends=bare_sends,
        committed=committed,
        logs=logs,
    )
    return True


def _collect(ix: QueueIndex) -> tuple:
    """One loop over the ops' reads and sends: each key's reads as one int64 array.

    A group is one op's reads of one key; groups are numbered in op order, then in the
    op's order of keys (the order of Txn.pos). Sends that may join the version order (of
    ok and info ops, with an offset) are kept per key as (offsets, values, op ids).
    """
    groups: dict[Any, tuple[list, list]] = {}  # key -> (read lists, group ids)
    sends: dict[Any, tuple[list, list, list]] = {}
    first_at: dict[Any, tuple] = {}  # key -> (op id, rank) where it was first gathered
    g_tid: list[int] = []
    g_len: list[int] = []
    bare = 0  # sends of ok ops without an offset
    bare_sends: dict[Any, tuple[list, list, list]] = {}  # those of ok and info ops: (values, op ids, ranks)
    for t in ix.txns:
        tid = t.id
        if t.reads:
            for r, (k, pairs) in enumerate(t.reads.items()):
                e = groups.get(k)
                if e is None:
                    groups[k] = e = ([], [])
                    first_at.setdefault(k, (tid, r))
                e[0].append(pairs)
                e[1].append(len(g_tid))
                g_tid.append(tid)
                g_len.append(len(pairs))
        if t.sends and t.type != FAIL:
            ok = t.type == OK
            for r, (k, v, o) in enumerate(t.sends, len(t.reads)):
                if o is None:
                    bare += ok
                    b = bare_sends.get(k)
                    if b is None:
                        bare_sends[k] = b = ([], [], [])
                    b[0].append(v)
                    b[1].append(tid)
                    b[2].append(r)
                    continue
                s = sends.get(k)
                if s is None:
                    sends[k] = s = ([], [], [], [])
                s[0].append(o)
                s[1].append(v)
                s[2].append(tid)
                s[3].append(r)
                if ok and k not in first_at:
                    first_at[k] = (tid, r)
    reads: dict[Any, tuple[np.ndarray, list]] = {}
    try:
        for k, (lists, gids) in groups.items():
            reads[k] = (_flatten(lists, 2 * sum(g_len[g] for g in gids)), gids)
        flat_sends = {
            k: (
                np.frombuffer(array("q", o), dtype=_I64),
                np.frombuffer(array("q", v), dtype=_I64),
                np.asarray(tids, dtype=_I64),
                np.asarray(ranks, dtype=_I64),
            )
            for k, (o, v, tids, ranks) in sends.items()
        }
    except (TypeError, OverflowError, ValueError):
        raise _NotInts from None
    if any(s[0].min() < 0 for s in flat_sends.values()):
        raise _NotInts
    try:
        flat_bare: dict | None = {
            k: (np.frombuffer(array("q", v), dtype=_I64), np.asarray(t, dtype=_I64), np.asarray(r, dtype=_I64))
            for k, (v, t, r) in bare_sends.items()
        }
    except (TypeError, OverflowError):  # a value sent that is not an int64: the loops will do
        flat_bare = None
    return reads, flat_sends, first_at, g_tid, g_len, bare, flat_bare


def _flatten(lists: list[list], n: int) -> np.ndarray:
    """One key's read lists as one int64 array of n items: offset, value, offset, ...

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


def _first_readers(ix: QueueIndex, per_key: dict, ok_t: np.ndarray) -> dict:
    """reads_ok: key -> value -> id of the first ok op that read it; keys in first-read order.

    Returns the same as arrays: key -> (the values, sorted; the id of each one's reader).
    """
    reads_ok: dict[Any, dict] = {}
    arrays: dict[Any, tuple] = {}
    for k, (_, vals, _, lens, g_tids) in per_key.items():
        # Keys some ok op read (even an empty list of pairs), as queue_index does.
        if not ok_t[g_tids].any():
            continue
        tids = np.repeat(g_tids, lens)
        okp = ok_t[tids]
        arrays[k] = v, t = _first_of_each(vals[okp], tids[okp])
        reads_ok[k] = dict(zip(v.tolist(), t.tolist(), strict=True))
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
    per_key: dict,
    sends: dict,
    committed: np.ndarray,
    groups: _Groups,
    key_no: dict,
) -> dict:
    """ix.orders from every read and committed send; each key's reads then placed in it.

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
        ix.orders[k] = key_order_sorted(uo.tolist(), first_values.tolist(), {})
    if mixed:
        # As the general path does: each offset's values in the order first seen.
        ordered = _pairs_in_order(ix, mixed)
        for k in mixed:
            conflicts = _conflicts(ordered[k])
            log = dict(ordered[k])
            log.update((o, vs[0]) for o, vs in conflicts.items())
            offsets = unique[k].tolist()
            ix.orders[k] = key_order_sorted(offsets, [log[o] for o in offsets], conflicts)
    return logs


@dataclass(frozen=True, slots=True)
class ReadGroups:
    """Each op's read of each key (a group), numbered in op order then in the op's key order.

    Where each group landed in its key's version order (what Txn.pos says on the general
    path) is in `first`, `last` and `contiguous`; `max` is its highest offset.
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
    ok_sends_placed: bool  # every send of an ok op is in `sends` (carries an offset)
    first_reader: dict  # key -> (values some ok op read, sorted; the first such op's id)
    # key -> (values, op ids, ranks) of the sends of ok and info ops without an offset;
    # None when some such value is not an int64
    bare_sends: dict | None
    committed: np.ndarray  # by op id: Txn.committed
    logs: dict  # key -> its log (sorted offsets, the value at each); None: an offset holds two


class _Groups:
    """Where each group (one op's reads of one key) landed (see queue_index._positions),
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

"""build_index's passes over every read, done as numpy passes over flat per-key arrays.

A history's reads are millions of small [offset, value] lists. Walking them in Python,
even through C helpers (map, zip, dict), touches each several times across a heap of
gigabytes. Here they are copied once, in op order, into one int64 array (offsets and
values interleaved), split by key with one gather, and the first reader of each value,
the version order and where each op's reads land in it are computed as whole-array
operations. What they produce is exactly what the general path of queue_index.py
produces; that path still runs when some offset or value is not a 64-bit integer
(array('q') refuses None, strings, floats and huge ints alike) or some offset is negative.

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
    Gathered,
    QueueIndex,
    _conflicts,
    _pairs_in_order,
    _rank,
    key_order_sorted,
    txn_columns,
)

_I64 = np.int64


class _NotInts(Exception):
    """Some read or send does not fit the int64 arrays, or has a negative offset (the
    realtime lag indexes by offset, and Python lists read a negative index from the end):
    use the general path."""


def flat_index(ix: QueueIndex, gathered: Gathered) -> bool:
    """Fill ix.reads_ok, ix.orders, Txn.committed and ix.groups; False if not all ints >= 0.

    ix holds the txns queue_index._gather made, `gathered` what it collected. On False
    nothing in either was changed that the general path does not set again.
    """
    try:
        per_key, sends, g_tid_a, g_len_a, bare_sends = _arrays(gathered, len(ix.txns))
    except _NotInts:
        return False
    first_at, bare = gathered.first_at, gathered.bare_ok
    cols = txn_columns(ix)
    ok_t = cols.ok
    first_reader = _first_readers(ix, per_key, ok_t)
    committed = ok_t.copy()
    committed[_commit_info(ix, first_at, np.flatnonzero(cols.info).tolist())] = True
    keys = sorted(first_at, key=first_at.__getitem__)
    groups = _Groups(len(g_len_a))
    # per_key's keys are gathered.key_no's, in its order (and popped as they are placed)
    logs = _version_orders(ix, keys, per_key, sends, committed, groups, gathered.key_no)
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
        ok_sends_placed=bare == 0,
        first_reader=first_reader,
        bare_sends=bare_sends,
        committed=committed,
        logs=logs,
    )
    return True


def _arrays(g: Gathered, n_txns: int) -> tuple:
    """What _gather collected, as int64 arrays: each key's reads (see _by_key), the sends
    per key as (offsets, values, op ids, ranks), the op id and length of each group, and
    the sends without an offset per key as (values, op ids, ranks).

    A send's rank is its place among the op's reads then sends (the order of Txn.pos, then
    Txn.sends): its place among the sends after as many as the op's reads.
    """
    lists = g.read_lists
    g_len = np.fromiter(map(len, lists), dtype=_I64, count=len(lists))
    g_tid = np.asarray(g.group_tid, dtype=_I64)
    n_reads = np.bincount(g_tid, minlength=n_txns)  # an op's groups: one per key it read

    def op_ids_and_ranks(tids: list, places: list) -> tuple[np.ndarray, np.ndarray]:
        t = np.asarray(tids, dtype=_I64)
        return t, np.asarray(places, dtype=_I64) + n_reads[t]

    try:
        # In op order, the order the pairs lie in memory: per key it was 1.5x slower.
        flat = _flatten(lists, 2 * int(g_len.sum()))
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
        bare: dict | None = {
            k: (np.frombuffer(array("q", v), dtype=_I64), *op_ids_and_ranks(t, places))
            for k, (v, t, places) in g.bare_sends.items()
        }
    except (TypeError, OverflowError):  # a value sent that is not an int64: the loops will do
        bare = None
    per_key = _by_key(flat, np.asarray(g.group_key, dtype=_I64), g_len, g_tid, list(g.key_no))
    return per_key, sends, g_tid, g_len, bare


def _by_key(flat: np.ndarray, g_key: np.ndarray, g_len: np.ndarray, g_tid: np.ndarray, keys: list) -> dict:
    """Every group's pairs (`flat`, in group order) split by key: k -> (offsets, values,
    group ids, group lengths, op id of each group), each key's groups in op order."""
    gids = np.argsort(g_key, kind="stable")  # by key, then in op order
    lens = g_len[gids]
    # Where each group's pairs start in `flat`, and in the output: one index per pair.
    src = np.cumsum(g_len) - g_len
    ends = np.cumsum(lens)
    at = np.repeat(src[gids] - (ends - lens), lens) + np.arange(len(flat) // 2, dtype=_I64)
    offs, vals = flat[0::2][at], flat[1::2][at]
    del at
    g_end = np.cumsum(np.bincount(g_key, minlength=len(keys)))
    p_end = ends[g_end - 1] if len(lens) else g_end
    out = {}
    g0 = p0 = 0
    for k, g1, p1 in zip(keys, g_end.tolist(), p_end.tolist(), strict=True):
        ids = gids[g0:g1]
        out[k] = (offs[p0:p1], vals[p0:p1], ids, lens[g0:g1], g_tid[ids])
        g0, p0 = g1, p1
    return out


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


def _first_readers(ix: QueueIndex, per_key: dict, ok_t: np.ndarray) -> dict:
    """reads_ok: key -> value -> id of the first ok op that read it; keys in first-read order.

    Returns the same as arrays: key -> (the values, sorted; the id of each one's reader).
    """
    reads_ok: dict[Any, dict] = {}
    arrays: dict[Any, tuple] = {}
    op_id = [t.id for t in ix.txns].__getitem__  # the ids' own int objects, not a copy per value
    for k, (_, vals, _, lens, g_tids) in per_key.items():
        # Keys some ok op read (even an empty list of pairs), as queue_index does.
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

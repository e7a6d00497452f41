"""A history read for the check in less memory: poll reads as one int64 array, invocations sharing.

A queue history is mostly its reads: millions of [offset, value] pairs, each decoded as a
list of its own holding two integers of their own (~130 bytes a pair; on bench_checker's
1M-op history 9.1M pairs, 1.1 GB of the 2.3 GB the loaded ops take). `load_queue_history`
moves every poll's pairs, as each line is read, into one `PairStore` (16 bytes a pair) and
leaves a `Pairs` view in their place; build_index then takes its arrays of reads straight
from the store instead of walking the lists.

A `Pairs` reads as a sequence of (offset, value) tuples, so the analyses and final_read that
walk an op's reads walk a view the same way. Only pairs of two integers within 64 bits
are moved: anything else (a float, a bool, a malformed pair) stays the list it was read
as, for build_index to refuse by name.

The rest of an op's value is mostly small objects of its own (on the same history, 1.2 KB
an op once the pairs are stored). Two of them are dropped as the lines are read (tracemalloc,
200k ops: 1,215 -> 941 bytes an op, -23 %):
- an invocation's value, when its completion says the same sends (same keys and values, in
  the same micro-ops): the invocation then holds its completion's value. Every reader of an
  invocation's value (build_index when the completion has none, publish_attempts) reads the
  same sends from either; poll micro-ops of an invocation carry nothing. -17 %.
- each micro-op's name, "send" or "poll", a string of its own as decoded: one shared. -5 %.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from itertools import chain
from operator import itemgetter
from typing import Any

from logquake.gcpause import paused_gc
from logquake.history import INVOKE, NEMESIS, Op, read_history

__all__ = ["PairStore", "Pairs", "joined", "load_queue_history"]

_INT = {int}
_TWO = {2}


class PairStore:
    """Pairs of many polls, one after the other: offset, value, offset, value, ...

    Polls are taken in batches (`take_polls` queues them, `flush` moves them): one C pass
    over a batch's pairs checks and copies them, where one call per poll cost 3-6 us.
    """

    __slots__ = ("data", "_queued")

    def __init__(self) -> None:
        self.data = array("q")
        self._queued: list[tuple[dict, Any, list]] = []  # (a poll's map, its key, the pairs)

    def take_polls(self, value: Any) -> None:
        """Queue the pairs of each poll micro-op of an op's value to become views into the
        store at the next flush (every _BATCH polls, and at the end of a read)."""
        if type(value) is not list:
            return
        queued = self._queued
        start = len(queued)
        polls = 0
        for mop in value:
            if type(mop) is list and len(mop) > 1 and mop[0] == "poll" and type(mop[1]) is dict:
                read = mop[1]
                polls += 1
                for k, pairs in read.items():
                    if type(pairs) is list:
                        queued.append((read, k, pairs))
        if polls > 1:  # the op's polls of one key side by side: `joined` then copies nothing
            queued[start:] = sorted(queued[start:], key=_KEY_OF_QUEUED)
        if len(queued) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Replace the queued pairs by views into the store (those that fit: see take)."""
        queued, self._queued = self._queued, []
        if not queued:
            return
        lists = [q[2] for q in queued]
        if not _all_int_pairs(lists):
            for read, k, pairs in queued:
                view = self.take(pairs)
                if view is not None:
                    read[k] = view
            return
        data = self.data
        start = len(data)
        try:
            data.extend(chain.from_iterable(chain.from_iterable(lists)))
        except OverflowError:  # some integer beyond 64 bits: pair by pair
            del data[start:]
            self._queued = queued
            for read, k, pairs in queued:
                view = self.take(pairs)
                if view is not None:
                    read[k] = view
            self._queued = []
            return
        at = start >> 1
        for read, k, pairs in queued:
            n = len(pairs)
            read[k] = Pairs(data, at, n)
            at += n

    def take(self, pairs: list | Pairs) -> Pairs | None:
        """A view of `pairs` appended here; None (nothing appended) unless every pair is
        two integers (not bools) within 64 bits."""
        if type(pairs) is Pairs:
            pairs = list(pairs)
        if not _all_int_pairs([pairs]):
            return None
        data = self.data
        start = len(data)
        try:
            data.extend(chain.from_iterable(pairs))
        except OverflowError:
            del data[start:]
            return None
        return Pairs(data, start >> 1, len(pairs))


_BATCH = 4096
_KEY_OF_QUEUED = itemgetter(1)


def _all_int_pairs(lists: list[list]) -> bool:
    """Every item of every list is a list or tuple of two ints (not bools): C passes only."""
    try:
        return (
            set(map(type, chain.from_iterable(lists))) <= _PAIR_TYPES
            and set(map(len, chain.from_iterable(lists))) <= _TWO
            and set(map(type, chain.from_iterable(chain.from_iterable(lists)))) <= _INT
        )
    except TypeError:
        return False


_PAIR_TYPES = {list, tuple}


def joined(a: Pairs | list, b: Pairs | list) -> Pairs | list:
    """An op's two polls of one key as one read: a view when both are views of one store
    (of the pairs where they lie when b follows a, as take_polls places them)."""
    if type(a) is Pairs and type(b) is Pairs and a.data is b.data:
        if b.start == a.start + a.n:
            return Pairs(a.data, a.start, a.n + b.n)
        data = a.data
        start = len(data)
        data.extend(data[2 * a.start : 2 * (a.start + a.n)])
        data.extend(data[2 * b.start : 2 * (b.start + b.n)])
        return Pairs(data, start >> 1, a.n + b.n)
    return [*a, *b]


class Pairs:
    """One poll's reads of one key, held in a PairStore: a sequence of (offset, value)."""

    __slots__ = ("data", "start", "n")

    def __init__(self, data: array, start: int, n: int) -> None:
        self.data = data  # the store's array
        self.start = start  # index of the first pair (pairs are 2 items)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, int]]:
        a, b = 2 * self.start, 2 * (self.start + self.n)
        return zip(self.data[a:b:2], self.data[a + 1 : b : 2], strict=True)

    def __getitem__(self, i: int) -> tuple[int, int]:
        if type(i) is not int:
            raise TypeError("Pairs takes an integer index")
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("Pairs index out of range")
        j = 2 * (self.start + i)
        return self.data[j], self.data[j + 1]

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same pairs (lists or tuples)."""
        try:
            return len(other) == self.n and all(  # type: ignore[arg-type]
                len(q) == 2 and p[0] == q[0] and p[1] == q[1] for p, q in zip(self, other, strict=True)  # type: ignore[call-overload]
            )
        except TypeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Pairs({[list(p) for p in self]!r})"


def load_queue_history(path: str | os.PathLike[str]) -> list[Op]:
    """A history.jsonl as load_history reads it, with every poll's pairs in one PairStore and
    invocations sharing their completions' values where those say the same sends."""
    store = PairStore()
    ops: list[Op] = []
    in_flight: dict[Any, Op] = {}
    with paused_gc():  # (as load_history: millions of live containers)
        for op in read_history(path):
            ops.append(op)
            if op.process == NEMESIS:
                continue
            if op.type == INVOKE:
                in_flight[op.process] = op
                continue
            store.take_polls(op.value)
            inv = in_flight.pop(op.process, None)
            if inv is not None and op.f in _QUEUE_FS and _same_sends(inv.value, op.value):
                _SET_VALUE(inv, op.value)
    store.flush()
    return ops


_QUEUE_FS = frozenset({"send", "poll", "txn"})
_NAMES = {"send": "send", "poll": "poll"}
_SET_VALUE = Op.__dict__["value"].__set__  # (Op is frozen: as history.py builds them)


def _same_sends(invoked: Any, done: Any) -> bool:
    """Whether a completion's micro-ops are the invocation's, each send to the same key with the
    same value (its result [offset, value], or unfinished, the value). Interns their names."""
    if type(invoked) is not list or type(done) is not list or len(invoked) != len(done):
        return False
    for a, b in zip(invoked, done, strict=True):
        if type(a) is not list or type(b) is not list or not a or not b:
            return False
        name = _NAMES.get(b[0])
        if name is None or a[0] != name:
            return False
        b[0] = name
        if name == "send":
            if len(a) != 3 or len(b) != 3 or type(a[1]) is not int or type(b[1]) is not int or a[1] != b[1] or type(a[2]) is not int:
                return False
            r = b[2]
            if not (type(r) is int and r == a[2] or type(r) is list and len(r) == 2 and type(r[1]) is int and r[1] == a[2]):
                return False
    return True

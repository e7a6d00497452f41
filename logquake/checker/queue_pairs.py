"""Poll reads as one int64 array: what the check from a file (queue_stream.py) holds of them.

A queue history is mostly its reads: millions of [offset, value] pairs, each decoded as a
list of its own holding two integers of their own (~130 bytes a pair; on bench_checker's
1M-op history 9.1M pairs, 1.1 GB of the 2.3 GB the loaded ops take). queue_stream moves
every poll's pairs, as each line is read, into one `PairStore` (16 bytes a pair) and
leaves a `Pairs` view in their place; build_index then takes its arrays of reads straight
from the store instead of walking the lists. The store holds int32 (8 bytes a pair) until
some offset or value needs more, then int64 for all.

A `Pairs` reads as a sequence of (offset, value) tuples, so the analyses that walk an op's
reads walk a view the same way. Only pairs of two integers within 64 bits are moved:
anything else (a float, a bool, a malformed pair) stays the list it was read as, for
build_index to refuse by name.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

__all__ = ["PairStore", "Pairs", "joined"]

_INT = {int}
_TWO = {2}


class PairStore:
    """Pairs of many polls, one after the other: offset, value, offset, value, ...

    Polls are taken in batches (`take_polls` queues them, `flush` moves them): one C pass
    over a batch's pairs checks and copies them, where one call per poll cost 3-6 us.
    `data` is an array("i") while every number fits 32 bits, then an array("q") (views
    read it through the store, so they follow).
    """

    __slots__ = ("data", "_queued")

    def __init__(self) -> None:
        self.data = array("i")
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
        start = len(self.data)
        if not self._extend(lambda: chain.from_iterable(chain.from_iterable(lists))):  # beyond 64 bits: pair by pair
            for read, k, pairs in queued:
                view = self.take(pairs)
                if view is not None:
                    read[k] = view
            return
        at = start >> 1
        for read, k, pairs in queued:
            n = len(pairs)
            read[k] = Pairs(self, at, n)
            at += n

    def take(self, pairs: list | Pairs) -> Pairs | None:
        """A view of `pairs` appended here; None (nothing appended) unless every pair is
        two integers (not bools) within 64 bits."""
        if type(pairs) is Pairs:
            pairs = list(pairs)
        if not _all_int_pairs([pairs]):
            return None
        start = len(self.data)
        if not self._extend(lambda: chain.from_iterable(pairs)):
            return None
        return Pairs(self, start >> 1, len(pairs))

    def _extend(self, items: Callable[[], Iterable[int]]) -> bool:
        """Append the integers `items()` gives; False (nothing appended) if one is beyond 64
        bits. One beyond 32 bits makes the store int64 first."""
        data = self.data
        start = len(data)
        try:
            data.extend(items())
            return True
        except OverflowError:
            del data[start:]
        if data.typecode == "q":
            return False
        wide = array("q")
        wide.frombytes(np.frombuffer(data, dtype=np.int32).astype(np.int64).tobytes())
        self.data = wide
        return self._extend(items)

    def array(self) -> np.ndarray:
        """The store's numbers as a numpy array (a view: int32 or int64)."""
        return np.frombuffer(self.data, dtype=np.int32 if self.data.typecode == "i" else np.int64)


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
    if type(a) is Pairs and type(b) is Pairs and a.store is b.store:
        if b.start == a.start + a.n:
            return Pairs(a.store, a.start, a.n + b.n)
        data = a.store.data
        start = len(data)
        data.extend(data[2 * a.start : 2 * (a.start + a.n)])
        data.extend(data[2 * b.start : 2 * (b.start + b.n)])
        return Pairs(a.store, start >> 1, a.n + b.n)
    return [*a, *b]


class Pairs:
    """One poll's reads of one key, held in a PairStore: a sequence of (offset, value)."""

    __slots__ = ("store", "start", "n")

    def __init__(self, store: PairStore, start: int, n: int) -> None:
        self.store = store
        self.start = start  # index of the first pair (pairs are 2 items)
        self.n = n

    @property
    def data(self) -> array:
        """The store's array."""
        return self.store.data

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, int]]:
        a, b = 2 * self.start, 2 * (self.start + self.n)
        data = self.store.data
        return zip(data[a:b:2], data[a + 1 : b : 2], strict=True)

    def __getitem__(self, i: int) -> tuple[int, int]:
        if type(i) is not int:
            raise TypeError("Pairs takes an integer index")
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("Pairs index out of range")
        j = 2 * (self.start + i)
        data = self.store.data
        return data[j], data[j + 1]

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

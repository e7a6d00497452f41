"""Per-partition transaction index: open transactions, last stable offset, aborted transactions.

Pure data rebuilt by every replica from the log, like the producer state: `apply_batch` is
applied to each batch in log order. A transactional data batch opens (or extends) its
producer's transaction at the batch's first offset; a COMMIT or ABORT control batch closes
it, an ABORT adding (producer id, first offset, marker offset) to the aborted index.

The last stable offset (LSO) is the first offset of the oldest open transaction, capped by
the high watermark: read_committed consumers read below it only, and drop the records of
the aborted transactions the Fetch response lists. Unsafe mode `read_committed: leak` is
read in one place, `fetch_upper_bound`'s `leak` argument: read_committed fetches then go up
to the high watermark, past open transactions.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from logquake.broker.batches import BatchInfo

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "AbortedTxn",
    "TxnIndex",
    "EMPTY",
    "apply_batch",
    "last_stable_offset",
    "fetch_upper_bound",
    "aborted_between",
]


@dataclass(frozen=True, kw_only=True)
class AbortedTxn:
    """One aborted transaction of one partition, as a Fetch response lists it."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of its ABORT marker


@dataclass(frozen=True, kw_only=True, eq=False)
class TxnIndex:
    """Open transactions (producer id -> first offset) and aborted ones, by marker offset.

    The aborted index is the first `_n` items of `_log`, a list shared by every index that
    extends another: an abort appends to it in place when its index is the newest one to
    have grown it (the case of a partition applying its log), and copies only when an older
    index grows a branch. So an abort costs O(1), not a copy of every abort before it
    (quadratic over a long run), and every index still sees exactly its own prefix."""

    open: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    _log: list[AbortedTxn] = field(default_factory=list, repr=False)
    _n: int = 0

    @property
    def aborted(self) -> tuple[AbortedTxn, ...]:
        """The aborted transactions in marker order (a copy: for tests and diagnostics)."""
        return tuple(self._log[: self._n])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TxnIndex):
            return NotImplemented
        return self.open == other.open and self._n == other._n and self._log[: self._n] == other._log[: other._n]

    def __hash__(self) -> int:  # consistent with __eq__; lets EMPTY be a dataclass default
        return hash((self._n, len(self.open)))


EMPTY = TxnIndex()


def apply_batch(index: TxnIndex, info: BatchInfo) -> TxnIndex:
    """The index after `info` was appended to the log."""
    if info.is_control:
        return _close(index, info)
    if not info.is_transactional or info.producer_id in index.open:
        return index
    opened = dict(index.open)
    opened[info.producer_id] = info.first_offset
    return TxnIndex(open=MappingProxyType(opened), _log=index._log, _n=index._n)


def _close(index: TxnIndex, marker: BatchInfo) -> TxnIndex:
    first = index.open.get(marker.producer_id)
    if first is None:
        return index  # a marker for a transaction with no data here (e.g. a retried marker)
    opened = MappingProxyType({pid: off for pid, off in index.open.items() if pid != marker.producer_id})
    if marker.control_commit:
        return TxnIndex(open=opened, _log=index._log, _n=index._n)
    log, n = index._log, index._n
    if n == 0 or len(log) != n:  # a fresh list (never EMPTY's), or a branch off an older index
        log = log[:n]
    log.append(AbortedTxn(producer_id=marker.producer_id, first_offset=first, last_offset=marker.first_offset))
    return TxnIndex(open=opened, _log=log, _n=n + 1)


def last_stable_offset(index: TxnIndex, high_watermark: int) -> int:
    """The first offset of the oldest open transaction, or the high watermark if lower."""
    return min([high_watermark, *index.open.values()])


def fetch_upper_bound(index: TxnIndex, high_watermark: int, *, read_committed: bool, leak: bool = False) -> int:
    """The offset a Fetch may read up to (exclusive) for the consumer's isolation level."""
    if read_committed and not leak:  # unsafe mode `read_committed: leak`: the one place it is read
        return last_stable_offset(index, high_watermark)
    return high_watermark


def aborted_between(index: TxnIndex, start: int, end: int) -> tuple[AbortedTxn, ...]:
    """Aborted transactions with records in [start, end): what a Fetch of that range must list.

    Markers are appended in offset order, so `aborted` is sorted by last offset and those
    ending before `start` are skipped by bisection.
    """
    log, n = index._log, index._n
    lo = bisect.bisect_left(log, start, hi=n, key=lambda a: a.last_offset)
    return tuple(a for a in itertools.islice(log, lo, n) if a.first_offset < end)

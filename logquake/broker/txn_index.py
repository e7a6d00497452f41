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


@dataclass(frozen=True, kw_only=True)
class TxnIndex:
    """Open transactions (producer id -> first offset) and aborted ones, by marker offset."""

    open: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    aborted: tuple[AbortedTxn, ...] = ()


EMPTY = TxnIndex()


def apply_batch(index: TxnIndex, info: BatchInfo) -> TxnIndex:
    """The index after `info` was appended to the log."""
    if info.is_control:
        return _close(index, info)
    if not info.is_transactional or info.producer_id in index.open:
        return index
    opened = dict(index.open)
    opened[info.producer_id] = info.first_offset
    return TxnIndex(open=MappingProxyType(opened), aborted=index.aborted)


def _close(index: TxnIndex, marker: BatchInfo) -> TxnIndex:
    first = index.open.get(marker.producer_id)
    if first is None:
        return index  # a marker for a transaction with no data here (e.g. a retried marker)
    opened = {pid: off for pid, off in index.open.items() if pid != marker.producer_id}
    aborted = index.aborted
    if not marker.control_commit:
        aborted += (AbortedTxn(producer_id=marker.producer_id, first_offset=first,
                               last_offset=marker.first_offset),)
    return TxnIndex(open=MappingProxyType(opened), aborted=aborted)


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
    lo = bisect.bisect_left(index.aborted, start, key=lambda a: a.last_offset)
    return tuple(a for a in index.aborted[lo:] if a.first_offset < end)

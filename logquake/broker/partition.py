"""The partition state machine: what every replica rebuilds from a partition's committed log.

`apply(state, entry)` is deterministic and does no I/O: each replica applies the same
committed Raft entries in the same order and ends with the same offsets, batch index and
producer state. The leader assigned the Kafka offsets before proposing (records.py rewrote
the base offsets), so apply only checks them; the high watermark is `state.next_offset`.

Entry payloads are one kind byte and a body:

    RECORDS  0x01 + record batches (v2, offsets already assigned)
    (empty)  the Raft leader's no-op at the start of its term: changes no offsets

Besides offsets, `PartitionState` keeps what idempotence and transactions need, rebuilt from
the same batches: the idempotent producer windows (producer_state.apply_batch: the last 5
batches per producer id) and the transaction index (control batches are RECORDS too; open
transactions, the aborted index and the LSO follow from them). Committed consumer-group
offsets are records of `__consumer_offsets` partitions, folded by their coordinator
(offsets_log.py), not here.

Payloads: the newest `payload_window` bytes of entries stay referenced here for fetches; older
batches keep their offsets and positions, and a read of them gets their entries back through
`loader` (the Raft log, which reads its own older entries from disk), one call per read.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from logquake.broker import producer_state, txn_index
from logquake.broker.batches import BatchInfo
from logquake.broker.records import BatchHeader, parse_batches

Loader = Callable[[int, int], Sequence[bytes]]
"""`loader(lo, hi)`: the payloads of the committed Raft entries lo..hi-1."""

__all__ = [
    "KIND_RECORDS",
    "ApplyResult",
    "BatchRef",
    "PartitionState",
    "apply",
    "records_payload",
]

KIND_RECORDS = 0x01
RECORDS_PREFIX = bytes((KIND_RECORDS,))


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchRef:
    """Where a committed batch lives: Kafka offsets -> Raft index and byte range in the payload."""

    base_offset: int
    last_offset: int
    raft_index: int
    start: int  # byte position of the batch inside the entry's payload (after the kind byte)
    length: int
    max_timestamp: int


def _col() -> array[int]:
    return array("q")


@dataclass(kw_only=True)
class PartitionState:
    """Committed state of one partition. Mutated only by `apply`.

    The batch index is columnar (one int64 array per BatchRef field): a batch costs ~64 bytes
    here besides its payload, where a BatchRef, a memoryview and their ints cost ~450, which
    made most of a broker's growth per record (measured with tracemalloc, ~850 B an entry)."""

    next_offset: int = 0  # = high watermark: the offset after the last committed record
    log_start_offset: int = 0
    applied_index: int = 0
    _bases: array[int] = field(default_factory=_col)  # batches' base offsets, for bisect
    _lasts: array[int] = field(default_factory=_col)
    _indexes: array[int] = field(default_factory=_col)  # Raft index of the entry holding the batch
    _starts: array[int] = field(default_factory=_col)  # byte position in the payload (after the kind byte)
    _lengths: array[int] = field(default_factory=_col)
    _max_ts: array[int] = field(default_factory=_col)
    # The running total of batch sizes up to each batch's end, so a fetch of many small
    # batches is two bisects and one join; and the entry payload holding each batch from
    # `_kept` on (shared by the batches of one entry; older ones are loaded when read).
    _ends: array[int] = field(default_factory=_col)
    _payloads: list[bytes] = field(default_factory=list)
    _kept: int = 0  # the first batch whose payload is in `_payloads` (at _payloads[k - _kept])
    payload_bytes: int = 0  # bytes of the distinct entry payloads held
    # None: hold every payload. Else trim beyond it, reading older batches through `loader`.
    payload_window: int | None = field(default=None, compare=False)
    loader: Loader | None = field(default=None, compare=False, repr=False)
    producers: producer_state.ProducerStates = producer_state.EMPTY
    txns: txn_index.TxnIndex = txn_index.EMPTY  # open transactions (LSO) and the aborted index

    @property
    def batches(self) -> Batches:
        """The committed batches in offset order, as BatchRefs made on access."""
        return Batches(self)

    @property
    def high_watermark(self) -> int:
        return self.next_offset

    @property
    def last_stable_offset(self) -> int:
        return txn_index.last_stable_offset(self.txns, self.next_offset)
    last_term: int = 0  # term of the last applied entry (= leader epoch that wrote it)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # (leader epoch, its first offset)

    def end_offset_for_epoch(self, epoch: int, *, current_epoch: int | None = None) -> tuple[int, int]:
        """KIP-320, as Kafka's LeaderEpochFileCache.endOffsetFor answers it: (epoch, end offset).

        The epochs known here are those with records, plus the leader's own `current_epoch`
        (Kafka's leader adds its epoch when elected, before writing anything), which ends at
        the high watermark. For a known epoch or one between two known epochs the answer is
        (largest known epoch <= `epoch`, start of the next known epoch). Below every known
        epoch it is (`epoch`, start of the first known epoch): nothing of `epoch` is here.
        UNDEFINED (-1, -1) only for epoch -1 or an epoch above all known ones."""
        epochs = self.epochs
        if current_epoch is not None and (not epochs or epochs[-1][0] < current_epoch):
            epochs = [*epochs, (current_epoch, self.next_offset)]
        if epoch < 0 or not epochs or epoch > epochs[-1][0]:
            return -1, -1
        if epoch == epochs[-1][0]:
            return epoch, self.next_offset
        i = bisect.bisect_right(epochs, (epoch, 2**63))  # first known epoch above `epoch`
        higher_start = epochs[i][1]
        if i == 0:
            return epoch, higher_start
        return epochs[i - 1][0], higher_start

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch that wrote `offset` (Kafka's epochForOffset), -1 when none did."""
        i = bisect.bisect_right([start for _, start in self.epochs], offset) - 1
        return self.epochs[i][0] if i >= 0 and offset < self.next_offset else -1

    def locate(self, offset: int) -> int:
        """Index in `batches` of the batch holding `offset` (or the first after it)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i >= 0 and self._lasts[i] >= offset:
            return i
        return i + 1

    def read(self, offset: int, upto: int, max_bytes: int, *, first: bool) -> bytes:
        """The committed batches from the one holding `offset` up to (not including) the first
        whose base offset is `upto` or more, at most `max_bytes` of them; when `first` (nothing
        else is in the response yet) the first batch goes out even if larger (KIP-74)."""
        i = self.locate(offset)
        stop = bisect.bisect_left(self._bases, upto, i)
        if i >= stop:
            return b""
        ends = self._ends
        before = ends[i - 1] if i else 0
        j = bisect.bisect_right(ends, before + max_bytes, i, stop)
        if j == i and first:
            j = i + 1
        return b"".join(self.batch_bytes(i, j))

    def batch_bytes(self, i: int, j: int) -> list[bytes]:
        """The bytes of batches i..j-1. Those whose payloads were trimmed are loaded with one
        `loader` call for their whole range of entries (a fetch from offset 0 of many small
        batches is one read, not one per batch).

        Copies, not memoryviews: bytes are not tracked by the garbage collector, and the
        thousands of views a fetch of small batches made were promoted and set off full
        collections (80-110 ms pauses in a broker, a third of a fetch from offset 0)."""
        out: list[bytes] = []
        starts, lengths, idx = self._starts, self._lengths, self._indexes
        kept = self._kept
        if i < kept:
            stop = min(j, kept)
            lo = idx[i]
            if self.loader is None:
                raise RuntimeError("trimmed batches read without a loader")
            payloads = self.loader(lo, idx[stop - 1] + 1)
            for k in range(i, stop):
                a = 1 + starts[k]
                out.append(payloads[idx[k] - lo][a : a + lengths[k]])
            i = stop
        pays = self._payloads
        for k in range(i, j):
            a = 1 + starts[k]
            out.append(pays[k - kept][a : a + lengths[k]])
        return out

    def trim(self, window: int | None = None) -> None:
        """Let go of the oldest payloads while more than `window` (default `payload_window`)
        bytes are held, only once a quarter over it, so the list is cut rarely and in big
        pieces. Nothing when this state keeps every payload (no `payload_window`)."""
        if self.payload_window is None:
            return
        if window is None:
            window = self.payload_window
        if self.payload_bytes <= window + (window >> 2):
            return
        pays, idx = self._payloads, self._indexes
        kept, n = self._kept, len(self._bases)
        size = self.payload_bytes
        k = kept
        while k < n and size > window:
            if k + 1 == n or idx[k + 1] != idx[k]:  # the entry's last batch: its payload goes
                size -= len(pays[k - kept])
            k += 1
        del pays[: k - kept]
        self._kept = k
        self.payload_bytes = size

    def readable(self, offset: int, upto: int) -> int:
        """Bytes `read(offset, upto, ...)` would return with no size limit."""
        i = self.locate(offset) if offset < upto else len(self._bases)
        stop = bisect.bisect_left(self._bases, upto, i)
        if i >= stop:
            return 0
        return self._ends[stop - 1] - (self._ends[i - 1] if i else 0)

    def offset_for_timestamp(self, ts: int) -> int | None:
        """First offset whose batch has max_timestamp >= ts (Kafka's ListOffsets), None if none."""
        for k, max_ts in enumerate(self._max_ts):  # linear: ListOffsets by time is rare
            if max_ts >= ts:
                return self._bases[k]
        return None


class Batches(Sequence[BatchRef]):
    """A read-only sequence view of a PartitionState's batch columns."""

    __slots__ = ("_st",)

    def __init__(self, st: PartitionState) -> None:
        self._st = st

    def __len__(self) -> int:
        return len(self._st._bases)

    @overload
    def __getitem__(self, i: int) -> BatchRef: ...
    @overload
    def __getitem__(self, i: slice) -> list[BatchRef]: ...
    def __getitem__(self, i: int | slice) -> BatchRef | list[BatchRef]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        st = self._st
        return BatchRef(base_offset=st._bases[i], last_offset=st._lasts[i], raft_index=st._indexes[i],
                        start=st._starts[i], length=st._lengths[i], max_timestamp=st._max_ts[i])

    def __iter__(self) -> Iterator[BatchRef]:
        return (self[k] for k in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Batches | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True, slots=True)
class ApplyResult:
    """What applying one entry did: the offsets it took (None for a no-op)."""

    base_offset: int | None = None
    last_offset: int | None = None


class ApplyError(Exception):
    """A committed entry contradicts the state: a bug (replicas would diverge)."""


def records_payload(batches: bytes) -> bytes:
    return bytes((KIND_RECORDS,)) + batches


def apply(state: PartitionState, *, index: int, term: int, data: bytes) -> ApplyResult:
    """Apply one committed entry (Raft index, term, payload) to `state`."""
    state.applied_index = index
    state.last_term = term
    if not data:
        return ApplyResult()
    kind = data[0]
    if kind == KIND_RECORDS:
        if not state.epochs or state.epochs[-1][0] != term:
            state.epochs.append((term, state.next_offset))
        return _apply_records(state, index, data)
    raise ApplyError(f"unknown entry kind {kind:#x} at index {index}")


def _apply_records(state: PartitionState, index: int, data: bytes) -> ApplyResult:
    body = memoryview(data)[1:]
    headers = parse_batches(body, verify_crc=False)  # the leader verified before proposing
    if headers:
        state.payload_bytes += len(data)
    first = state.next_offset
    for h in headers:
        base = int.from_bytes(body[h.start : h.start + 8], "big", signed=True)
        if base != state.next_offset:
            raise ApplyError(f"batch at index {index} has base offset {base}, expected {state.next_offset}")
        last = base + h.last_offset_delta
        state._bases.append(base)
        state._lasts.append(last)
        state._indexes.append(index)
        state._starts.append(h.start)
        state._lengths.append(h.length)
        state._max_ts.append(h.max_timestamp)
        state._ends.append((state._ends[-1] if state._ends else 0) + h.length)
        state._payloads.append(data)
        _remember_producer(state, body, h, base)
        state.next_offset = last + 1
    state.trim()
    return ApplyResult(base_offset=first, last_offset=state.next_offset - 1)


def batch_info(body: bytes | memoryview, h: BatchHeader, base: int) -> BatchInfo:
    """A batch as the idempotence and transaction state machines see it, from its parsed header."""
    if h.is_control:  # the marker type lives in the record: let batches.py read it
        return BatchInfo.parse(body[h.start : h.start + h.length], base_offset=base)
    return BatchInfo(first_offset=base, record_count=h.last_offset_delta + 1, producer_id=h.producer_id,
                     producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                     is_transactional=h.is_transactional, is_control=False)


def _remember_producer(state: PartitionState, body: memoryview, h: BatchHeader, base: int) -> None:
    if h.producer_id < 0:
        return
    info = batch_info(body, h, base)
    state.producers = producer_state.apply_batch(state.producers, info)
    if h.is_transactional or h.is_control:
        state.txns = txn_index.apply_batch(state.txns, info)

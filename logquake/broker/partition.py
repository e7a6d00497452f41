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

Payloads: the newest `payload_window` bytes of entries stay referenced here for fetches, each of
their batches with a row of offsets and positions. Older batches are indexed sparsely, as
Kafka's offset index is: one sample per SAMPLE_BYTES of batches (its base offset, the Raft
index of the entry it starts, the batch bytes before it, the largest timestamp of its block),
and a read there gets the block's entries back through `loader` (the Raft log, which reads its
own older entries from disk), one call per read, and walks their batch headers.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from logquake.broker import producer_state, txn_index
from logquake.broker.batches import BatchInfo
from logquake.broker.records import BatchHeader, parse_batches

Loader = Callable[[int, int], Sequence[bytes]]
"""`loader(lo, hi)`: the payloads of the committed Raft entries lo..hi-1."""

__all__ = [
    "KIND_RECORDS",
    "SAMPLE_BYTES",
    "ApplyResult",
    "BatchRef",
    "PartitionState",
    "apply",
    "records_payload",
]

KIND_RECORDS = 0x01
RECORDS_PREFIX = bytes((KIND_RECORDS,))
SAMPLE_BYTES = 4096  # batches whose payloads were let go: one sample per this many bytes of them
ROW_COST = 64  # a row's 8 columns, counted with the payloads against the window
# A v2 batch's first 43 bytes: base offset, batch length (the 12 bytes before it not counted),
# (leader epoch, magic, crc, attributes), last offset delta, (base timestamp), max timestamp.
_BATCH_PREFIX = struct.Struct(">qi11xi8xq")


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
    """Committed state of one partition. Mutated only by `apply` (and `trim`, which changes
    what is held in memory, not the state).

    The batches whose payloads are held have a row each in int64 columns (~64 bytes a batch,
    where a BatchRef, a memoryview and their ints cost ~450). Rows are kept only for those: a
    row per batch for the whole log was most of a broker's growth over an hour of small
    transactional writes (56 bytes an entry, for good); the sparse samples of the older
    batches cost ~32 bytes per SAMPLE_BYTES of them."""

    next_offset: int = 0  # = high watermark: the offset after the last committed record
    log_start_offset: int = 0
    applied_index: int = 0
    # Rows: the batches whose entry payloads are held, oldest first; the first row starts an entry.
    _bases: array[int] = field(default_factory=_col)  # batches' base offsets, for bisect
    _lasts: array[int] = field(default_factory=_col)
    _indexes: array[int] = field(default_factory=_col)  # Raft index of the entry holding the batch
    _starts: array[int] = field(default_factory=_col)  # byte position in the payload (after the kind byte)
    _lengths: array[int] = field(default_factory=_col)
    _max_ts: array[int] = field(default_factory=_col)
    # The running total of batch sizes from the log's start up to each batch's end, so a fetch
    # of many small batches is two bisects and one join; and the payload holding each batch.
    _ends: array[int] = field(default_factory=_col)
    _payloads: list[bytes] = field(default_factory=list)
    _before_rows: int = 0  # batch bytes before the first row (all of them while there is none)
    # Samples of the batches before the rows, each starting an entry and a block of batches.
    _s_bases: array[int] = field(default_factory=_col)
    _s_indexes: array[int] = field(default_factory=_col)
    _s_before: array[int] = field(default_factory=_col)  # batch bytes before the sample's batch
    _s_max_ts: array[int] = field(default_factory=_col)  # the largest max timestamp of its block
    payload_bytes: int = 0  # bytes of the distinct entry payloads held, plus ROW_COST a row
    # None: hold every payload. Else trim beyond it, reading older batches through `loader`.
    payload_window: int | None = field(default=None, compare=False)
    loader: Loader | None = field(default=None, compare=False, repr=False)
    sample_bytes: int = field(default=SAMPLE_BYTES, compare=False, repr=False)
    producers: producer_state.ProducerStates = producer_state.EMPTY
    txns: txn_index.TxnIndex = txn_index.EMPTY  # open transactions (LSO) and the aborted index

    @property
    def batches(self) -> list[BatchRef]:
        """Every committed batch in offset order, those out of the rows read back: for tests
        and diagnostics, not for serving."""
        out = [BatchRef(base_offset=base, last_offset=last, raft_index=index, start=a, length=n, max_timestamp=ts)
               for base, last, ts, index, _, a, n in self._blocks(0, len(self._s_bases))]
        return out + [BatchRef(base_offset=self._bases[k], last_offset=self._lasts[k], raft_index=self._indexes[k],
                               start=self._starts[k], length=self._lengths[k], max_timestamp=self._max_ts[k])
                      for k in range(len(self._bases))]

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

    # ---- reading ------------------------------------------------------------------------------

    def _row(self, offset: int) -> int:
        """The row of the batch holding `offset` (or the first after it)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i >= 0 and self._lasts[i] >= offset:
            return i
        return i + 1

    def _below_rows(self, offset: int) -> bool:
        """`offset` is in a batch older than the rows (one indexed by samples only)."""
        return bool(self._s_bases) and (not self._bases or offset < self._bases[0]) and offset < self.next_offset

    def _sample(self, offset: int) -> int:
        """The sample whose block holds `offset`."""
        return max(0, bisect.bisect_right(self._s_bases, offset) - 1)

    def read(self, offset: int, upto: int, max_bytes: int, *, first: bool) -> bytes:
        """The committed batches from the one holding `offset` up to (not including) the first
        whose base offset is `upto` or more, at most `max_bytes` of them; when `first` (nothing
        else is in the response yet) the first batch goes out even if larger (KIP-74)."""
        if not self._below_rows(offset):
            return b"".join(self._read_rows(self._row(offset), upto, max_bytes, first=first))
        s = self._sample(offset)
        n = len(self._s_bases)
        # The blocks a read of `max_bytes` can reach: the batch holding `offset` starts before
        # block s + 1 does, and none past `upto` is read. Loaded in one go.
        t = n if s + 1 == n else bisect.bisect_right(self._s_before, self._s_before[s + 1] + max(max_bytes, 0), s + 1)
        t = min(t, bisect.bisect_left(self._s_bases, upto, s + 1))
        out: list[bytes] = []
        size = 0
        unpack, start = _BATCH_PREFIX.unpack_from, max(offset, self._s_bases[s])
        for data in self._entries(s, max(t, s + 1)):  # _blocks' walk, inline: a fetch's hot loop
            pos, end = 1, len(data)
            while pos < end:
                base, length, delta, _ = unpack(data, pos)
                length += 12
                if base + delta >= start:
                    if base >= upto or (size + length > max_bytes and (out or not first)):
                        return b"".join(out)
                    out.append(data[pos : pos + length])
                    size += length
                pos += length
        if t >= n:  # read past the samples: on into the rows
            out += self._read_rows(0, upto, max_bytes - size, first=first and not out)
        return b"".join(out)

    def _read_rows(self, i: int, upto: int, max_bytes: int, *, first: bool) -> list[bytes]:
        stop = bisect.bisect_left(self._bases, upto, i)
        if i >= stop:
            return []
        ends = self._ends
        before = ends[i - 1] if i else self._before_rows
        j = bisect.bisect_right(ends, before + max_bytes, i, stop)
        if j == i and first:
            j = i + 1
        starts, lengths, pays = self._starts, self._lengths, self._payloads
        return [pays[k][1 + starts[k] : 1 + starts[k] + lengths[k]] for k in range(i, j)]

    def _blocks(self, s: int, t: int) -> Iterator[tuple[int, int, int, int, bytes, int, int]]:
        """(base, last, max timestamp, Raft index, payload, start, length) of each batch of
        sample blocks s..t-1, their entries read back with one `loader` call. Copies, not
        memoryviews, are made of them by the callers: bytes are not tracked by the garbage
        collector, and thousands of views set off full collections (80-110 ms pauses)."""
        if s >= t:
            return
        first_base = self._s_bases[s]
        unpack = _BATCH_PREFIX.unpack_from  # apply checked these batches: only their headers are read
        for index, data in self._entries(s, t, with_index=True):
            pos, n = 1, len(data)
            while pos < n:
                base, length, delta, max_ts = unpack(data, pos)
                length += 12
                if base >= first_base:
                    yield base, base + delta, max_ts, index, data, pos - 1, length
                pos += length

    @overload
    def _entries(self, s: int, t: int) -> Iterator[bytes]: ...
    @overload
    def _entries(self, s: int, t: int, *, with_index: Literal[True]) -> Iterator[tuple[int, bytes]]: ...
    def _entries(self, s: int, t: int, *, with_index: bool = False) -> Iterator[Any]:
        """The RECORDS payloads (with their Raft index) of the entries of sample blocks s..t-1,
        read back with one `loader` call."""
        if self.loader is None:
            raise RuntimeError("trimmed batches read without a loader")
        lo = self._s_indexes[s]
        if t < len(self._s_indexes):
            hi = self._s_indexes[t]
        else:
            hi = self._indexes[0] if self._indexes else self.applied_index + 1
        for index, data in enumerate(self.loader(lo, hi), lo):
            if data and data[0] == KIND_RECORDS:
                yield (index, data) if with_index else data

    def batches_from(self, offset: int, limit: int) -> list[tuple[int, bytes]]:
        """(last offset, bytes) of at most `limit` (>= 1) committed batches from the one holding
        `offset` on: for folding an internal partition a chunk at a time."""
        out: list[tuple[int, bytes]] = []
        if self._below_rows(offset):
            s, n = self._sample(offset), len(self._s_bases)
            while s < n:
                t = min(n, s + max(1, limit // 8))  # blocks hold several batches each
                for _, last, _, _, data, a, length in self._blocks(s, t):
                    if last >= offset:
                        out.append((last, data[1 + a : 1 + a + length]))
                        if len(out) == limit:
                            return out
                s = t
            offset = out[-1][0] + 1 if out else offset
        i = self._row(offset)
        j = min(len(self._bases), i + limit - len(out))
        starts, lengths, pays = self._starts, self._lengths, self._payloads
        out += [(self._lasts[k], pays[k][1 + starts[k] : 1 + starts[k] + lengths[k]]) for k in range(i, j)]
        return out

    def trim(self, window: int | None = None) -> None:
        """Let go of the oldest payloads while more than `window` (default `payload_window`)
        bytes are held, only once a quarter over it, so the rows are cut rarely and in big
        pieces; their batches get samples instead. Nothing when this state keeps every
        payload (no `payload_window`)."""
        if self.payload_window is None:
            return
        if window is None:
            window = self.payload_window
        if self.payload_bytes <= window + (window >> 2):
            return
        pays, idx = self._payloads, self._indexes
        n = len(idx)
        size = self.payload_bytes
        k = 0
        while k < n and size > window:  # whole entries: the rows must start one
            j = k + 1
            while j < n and idx[j] == idx[k]:
                j += 1
            size -= len(pays[k]) + ROW_COST * (j - k)
            k = j
        self._sample_rows(k)
        for col in (self._bases, self._lasts, self._indexes, self._starts, self._lengths, self._max_ts, self._ends):
            del col[:k]
        del pays[:k]
        self.payload_bytes = size

    def detached(self) -> PartitionState:
        """This state with every batch indexed by samples and no payload held: what a
        checkpoint keeps (checkpoint.py). The rows are sampled as `trim` would cut them, into
        copies: this state is left as it is."""
        c = PartitionState(next_offset=self.next_offset, log_start_offset=self.log_start_offset,
                           applied_index=self.applied_index, last_term=self.last_term, epochs=list(self.epochs),
                           producers=self.producers, txns=self.txns, sample_bytes=self.sample_bytes,
                           _before_rows=self._before_rows, _s_bases=array("q", self._s_bases),
                           _s_indexes=array("q", self._s_indexes), _s_before=array("q", self._s_before),
                           _s_max_ts=array("q", self._s_max_ts))
        # Borrowed for `_sample_rows`, which only reads the rows, then given back empty.
        c._bases, c._indexes, c._ends, c._lengths, c._max_ts = (
            self._bases, self._indexes, self._ends, self._lengths, self._max_ts)
        c._sample_rows(len(self._bases))
        c._bases, c._indexes, c._ends, c._lengths, c._max_ts = _col(), _col(), _col(), _col(), _col()
        return c

    def _sample_rows(self, k: int) -> None:
        """Sample rows 0..k-1 (whole entries), about to be cut: the first batch of an entry gets
        a sample once `sample_bytes` of batches passed since the last one."""
        if not k:
            return
        bases, idx, ends, lengths, max_ts = self._bases, self._indexes, self._ends, self._lengths, self._max_ts
        sb, si, sf, sm = self._s_bases, self._s_indexes, self._s_before, self._s_max_ts
        every = self.sample_bytes
        last = sf[-1] if sf else -every
        for r in range(k):
            before = ends[r] - lengths[r]
            if (r == 0 or idx[r] != idx[r - 1]) and before - last >= every:
                sb.append(bases[r])
                si.append(idx[r])
                sf.append(before)
                sm.append(max_ts[r])
                last = before
            elif max_ts[r] > sm[-1]:
                sm[-1] = max_ts[r]
        self._before_rows = ends[k - 1]

    def readable(self, offset: int, upto: int) -> int:
        """Bytes `read(offset, upto, ...)` would return with no size limit; below the rows, up
        to two blocks more (counted from the sample before `offset` to the one after `upto`),
        never 0 when there is something to read: a long poll's wake-up count."""
        if offset >= upto:
            return 0
        if self._bases and upto > self._bases[0]:
            end = self._ends[bisect.bisect_left(self._bases, upto) - 1]
        else:
            x = bisect.bisect_left(self._s_bases, upto)
            end = self._s_before[x] if x < len(self._s_bases) else self._before_rows
        if self._below_rows(offset):
            start = self._s_before[self._sample(offset)]
        else:
            i = self._row(offset)
            start = self._ends[i - 1] if i else self._before_rows
        return max(0, end - start)

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, max timestamp) of the first batch whose max timestamp is >= ts (Kafka's
        ListOffsets), None if none. Linear: ListOffsets by time is rare."""
        for s, block_max in enumerate(self._s_max_ts):
            if block_max >= ts:
                for base, _, max_ts, *_ in self._blocks(s, s + 1):
                    if max_ts >= ts:
                        return base, max_ts
        for k, max_ts in enumerate(self._max_ts):
            if max_ts >= ts:
                return self._bases[k], max_ts
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(max timestamp, base offset) of the first batch with the largest max timestamp
        (KIP-734's ListOffsets -3), None without batches."""
        best: tuple[int, int] | None = None
        if self._s_max_ts:
            s = max(range(len(self._s_max_ts)), key=self._s_max_ts.__getitem__)
            top = self._s_max_ts[s]
            best = next((ts, base) for base, _, ts, *_ in self._blocks(s, s + 1) if ts == top)
        for k, ts in enumerate(self._max_ts):
            if best is None or ts > best[0]:
                best = ts, self._bases[k]
        return best


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
        state.payload_bytes += len(data) + ROW_COST * len(headers)
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
        state._ends.append((state._ends[-1] if state._ends else state._before_rows) + h.length)
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

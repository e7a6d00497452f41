"""Record batches (magic v2) as opaque bytes: validate, read the header, set the base offset.

The broker never re-encodes client records: it checks the batch header and CRC, then
rewrites the base offset and partition leader epoch in place (both lie outside the CRC'd
range), so the bytes a consumer fetches are the bytes the producer sent. Full parsing
(kafka-python's `kafka.record`) is only for tests and tools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafka.record.util import calc_crc32c

__all__ = ["BatchHeader", "InvalidRecords", "parse_batches", "rewrite_batches", "batches_span"]

# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h,
# lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h,
# baseSequence i, recordCount i
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_CRC_START = 21
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class InvalidRecords(ValueError):
    """The producer sent records that are not well-formed v2 batches (CORRUPT_MESSAGE)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchHeader:
    """What the partition state machine needs from one batch."""

    start: int  # position in the buffer
    length: int  # whole batch, including the 12 bytes of offset and length
    last_offset_delta: int
    max_timestamp: int
    base_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    attributes: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


def parse_batches(buf: bytes | memoryview, *, verify_crc: bool = True) -> list[BatchHeader]:
    """Headers of the batches concatenated in `buf`; raises InvalidRecords on any defect."""
    out: list[BatchHeader] = []
    pos, n = 0, len(buf)
    view = memoryview(buf)
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise InvalidRecords(f"truncated batch header at byte {pos}")
        (_, blen, _, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq,
         count) = _HEADER.unpack_from(buf, pos)
        total = blen + 12
        if magic != 2:
            raise InvalidRecords(f"record batch magic {magic}; only v2 is supported")
        if blen < HEADER_SIZE - 12 or pos + total > n:
            raise InvalidRecords(f"batch length {blen} at byte {pos} exceeds the {n}-byte record set")
        if count < 0 or lod < 0:
            raise InvalidRecords(f"negative record count {count} or offset delta {lod}")
        if verify_crc and calc_crc32c(view[pos + _CRC_START : pos + total]) != crc:
            raise InvalidRecords(f"CRC mismatch in batch at byte {pos}")
        out.append(BatchHeader(start=pos, length=total, last_offset_delta=lod, max_timestamp=max_ts,
                               base_timestamp=base_ts, producer_id=pid, producer_epoch=pepoch,
                               base_sequence=bseq, record_count=count, attributes=attrs))
        pos += total
    return out


def rewrite_batches(buf: bytes, headers: list[BatchHeader], base_offset: int, leader_epoch: int, *,
                    prefix: bytes = b"") -> bytearray:
    """`prefix + buf` with consecutive offsets from `base_offset` (one copy of the records).

    The CRC stays valid: it covers the batch from its attributes on, not the base offset or
    the partition leader epoch."""
    k = len(prefix)
    out = bytearray(k + len(buf))
    out[:k] = prefix
    out[k:] = buf
    off = base_offset
    for h in headers:
        struct.pack_into(">q", out, k + h.start, off)
        struct.pack_into(">i", out, k + h.start + 12, leader_epoch)
        off += h.last_offset_delta + 1
    return out


def batches_span(headers: list[BatchHeader]) -> int:
    """How many offsets the batches occupy."""
    return sum(h.last_offset_delta + 1 for h in headers)

"""Batch header summaries and control batches, read back with kafka-python's own record parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from logquake.broker.batches import BatchFormatError, BatchInfo, control_batch


def client_batch(*, pid: int = 5, epoch: int = 2, seq: int = 10, n: int = 3, txn: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=txn, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=seq, batch_size=1 << 16)
    for i in range(n):
        builder.append(i, timestamp=1000 + i, key=None, value=b"v%d" % i, headers=[])
    return bytes(builder.build())


def test_parse_client_batch() -> None:
    info = BatchInfo.parse(client_batch(txn=True), base_offset=100)
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (5, 2, 10)
    assert (info.first_offset, info.last_offset, info.last_sequence) == (100, 102, 12)
    assert info.is_transactional and not info.is_control and info.is_idempotent


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_is_what_clients_expect(commit: bool) -> None:
    raw = control_batch(commit=commit, producer_id=7, producer_epoch=3, coordinator_epoch=4, timestamp_ms=9)
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch) == (7, 3)
    (record,) = list(batch)
    assert record.commit is commit and record.abort is (not commit)
    assert record.value == b"\x00\x00\x00\x00\x00\x04"  # version 0, coordinator epoch 4
    info = BatchInfo.parse(raw, base_offset=42)
    assert info.is_control and info.control_commit is commit and not info.is_idempotent
    assert MemoryRecords(raw).next_batch().is_control_batch


@given(st.booleans(), st.integers(0, 2**40), st.integers(0, 2**31 - 1), st.integers(0, 2**15 - 1),
       st.integers(0, 2**31 - 1))
def test_a_marker_read_in_place_reads_as_kafka_record_does(commit, ts, pid, epoch, coord) -> None:  # noqa: ANN001
    raw = control_batch(commit=commit, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coord,
                        timestamp_ms=ts)
    (record,) = list(DefaultRecordBatch(raw))
    assert BatchInfo.parse(raw, base_offset=0).control_commit is record.commit is commit
    assert BatchInfo.parse(memoryview(b"x" + raw)[1:], base_offset=0).control_commit is commit


def test_malformed_batches_are_the_peers_fault() -> None:
    with pytest.raises(BatchFormatError, match="shorter"):
        BatchInfo.parse(b"\x00" * 10, base_offset=0)
    raw = bytearray(client_batch())
    raw[16] = 1  # magic
    with pytest.raises(BatchFormatError, match="magic 1"):
        BatchInfo.parse(raw, base_offset=0)

"""The pure state machines: partition.apply and metadata.apply_metadata, replayed like every replica does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker import partition as pmod
from logquake.broker.metadata import (
    MetadataState,
    alloc_producer_ids_entry,
    apply_metadata,
    create_topic_entry,
)
from logquake.broker.records import batches_span, parse_batches, rewrite_batches


def _batch(n: int, ts: int, pid: int = -1, seq: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=ts + i, key=None, value=b"%d" % i, headers=[])
    return bytes(b.build())


# An entry: a term bump (0/1), then either a leader no-op (empty list) or 1-3 batches of 1-5 records.
entries = st.lists(st.tuples(st.integers(0, 1), st.lists(st.integers(1, 5), max_size=3)), max_size=25)


@settings(max_examples=100, deadline=None)
@given(entries)
def test_replicas_rebuild_the_same_dense_log(script) -> None:
    term, leo, log = 1, 0, []
    for bump, sizes in script:  # the leader: offsets assigned at append, as replica.append does
        term += bump
        if not sizes:
            log.append((term, b""))
            continue
        body = b"".join(_batch(n, 1000 * (len(log) + 1)) for n in sizes)
        hs = parse_batches(body)
        log.append((term, bytes(rewrite_batches(body, hs, leo, term, prefix=pmod.RECORDS_PREFIX))))
        leo += batches_span(hs)
    replicas = [pmod.PartitionState() for _ in range(2)]
    for st_ in replicas:
        for i, (t, data) in enumerate(log, start=1):
            pmod.apply(st_, index=i, term=t, data=data)
    a, b = replicas
    assert a.next_offset == b.next_offset == leo == a.high_watermark == a.last_stable_offset
    assert a.batches == b.batches and a.epochs == b.epochs
    assert [r.base_offset for r in a.batches] == sorted({r.base_offset for r in a.batches})
    for off in range(leo):  # every offset is found in the batch holding it
        ref = next(r for r in a.batches if r.last_offset >= off)
        assert ref.base_offset <= off <= ref.last_offset
    for epoch, start in a.epochs:  # KIP-320 end offsets follow the epoch starts
        got_epoch, end = a.end_offset_for_epoch(epoch)
        assert got_epoch == epoch and end > start



def _read_batch_by_batch(st_: pmod.PartitionState, log: list[tuple[int, bytes]], offset: int, upto: int,
                         max_bytes: int, first: bool) -> bytes:
    """The fetch read as the broker first did it: batch by batch from each entry's payload."""
    refs = [r for r in st_.batches if r.last_offset >= offset]
    out, size, i = [], 0, 0
    while i < len(refs):
        ref = refs[i]
        if ref.base_offset >= upto or (size + ref.length > max_bytes and (out or not first)):
            break
        out.append(log[ref.raft_index - 1][1][1 + ref.start : 1 + ref.start + ref.length])
        size += ref.length
        i += 1
    return b"".join(out)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=1, max_size=15), st.data())
def test_fetch_read_is_the_batches_in_range_within_the_size_limit(script, data) -> None:
    log, leo = [], 0
    for sizes in script:
        body = b"".join(_batch(n, 1000 * (len(log) + 1)) for n in sizes)
        hs = parse_batches(body)
        log.append((1, bytes(rewrite_batches(body, hs, leo, 1, prefix=pmod.RECORDS_PREFIX))))
        leo += batches_span(hs)
    state = pmod.PartitionState()
    for i, (t, payload) in enumerate(log, start=1):
        pmod.apply(state, index=i, term=t, data=payload)
    for _ in range(10):
        offset = data.draw(st.integers(0, leo))
        upto = data.draw(st.integers(0, leo + 1))
        max_bytes = data.draw(st.integers(-10, 600))
        first = data.draw(st.booleans())
        want = _read_batch_by_batch(state, log, offset, upto, max_bytes, first)
        assert state.read(offset, upto, max_bytes, first=first) == want
        # A long poll counts nothing readable at or past the bound (its fetch would read the
        # batch holding `offset` even then, but only once woken for another reason).
        readable = len(_read_batch_by_batch(state, log, offset, upto, 1 << 40, True)) if offset < upto else 0
        assert state.readable(offset, upto) == readable

def test_apply_rejects_an_offset_gap() -> None:
    body = _batch(2, 0)
    data = bytes(rewrite_batches(body, parse_batches(body), 5, 1, prefix=pmod.RECORDS_PREFIX))
    with pytest.raises(pmod.ApplyError):
        pmod.apply(pmod.PartitionState(), index=1, term=1, data=data)


def test_idempotent_batches_build_the_producer_window() -> None:
    st_ = pmod.PartitionState()
    off = 0
    for i, seq in enumerate((0, 3, 6)):
        body = _batch(3, 0, pid=42, seq=seq)
        hs = parse_batches(body)
        pmod.apply(st_, index=i + 1, term=1, data=bytes(rewrite_batches(body, hs, off, 1, prefix=pmod.RECORDS_PREFIX)))
        off += 3
    entry = st_.producers.get(42)
    assert entry is not None and entry.last_sequence == 8 and len(entry.batches) == 3


def test_metadata_topics_assignments_and_producer_ids() -> None:
    st_ = MetadataState(node_ids=(1, 2, 3))
    r = apply_metadata(st_, index=1, data=create_topic_entry("a", 3, 2))
    assert r["error_code"] == 0 and len(r["groups"]) == 3
    parts = st_.topics["a"].partitions
    assert [p.replicas for p in parts] == [(1, 2), (2, 3), (3, 1)]  # leaders spread over the nodes
    assert len({p.group_id for p in parts}) == 3
    assert apply_metadata(st_, index=2, data=create_topic_entry("a", 1, 1))["error_code"] == 36
    assert apply_metadata(st_, index=3, data=create_topic_entry("b", 1, 4))["error_code"] == 38
    assert apply_metadata(st_, index=4, data=create_topic_entry("b c", 1, 1))["error_code"] == 17
    first = apply_metadata(st_, index=5, data=alloc_producer_ids_entry(10, node=2, nonce="x"))["first"]
    second = apply_metadata(st_, index=6, data=alloc_producer_ids_entry(10, node=3, nonce="y"))["first"]
    assert second == first + 10 and st_.producer_id_blocks[3] == ("y", second, 10)
    assert apply_metadata(st_, index=7, data=json.dumps({"op": "nope"}).encode())["error_code"] == -1


def _epoch_state(epochs: list[tuple[int, int]], next_offset: int) -> pmod.PartitionState:
    st_ = pmod.PartitionState(next_offset=next_offset)
    st_.epochs = list(epochs)
    return st_


def test_end_offset_for_epoch_answers_as_kafkas_leader_epoch_cache() -> None:
    """LeaderEpochFileCache.endOffsetFor: UNDEFINED only for -1 and epochs above every known one."""
    st_ = _epoch_state([(2, 0), (4, 10), (7, 25)], 30)
    cases = {-1: (-1, -1), 0: (0, 0), 1: (1, 0),  # older than any: (requested, first start)
             2: (2, 10), 3: (2, 10), 4: (4, 25), 5: (4, 25), 6: (4, 25),
             7: (7, 30), 8: (7, 30),  # between the last records and the current term
             9: (9, 30),  # the leader's current term, no records yet: ends at the HW
             10: (-1, -1)}
    for epoch, want in cases.items():
        assert st_.end_offset_for_epoch(epoch, current_epoch=9) == want, epoch
    assert st_.end_offset_for_epoch(7) == (7, 30)  # without the leader's term: the last epoch is the latest
    assert st_.end_offset_for_epoch(8) == (-1, -1)
    empty = _epoch_state([], 0)
    assert empty.end_offset_for_epoch(3, current_epoch=3) == (3, 0)
    assert empty.end_offset_for_epoch(1, current_epoch=3) == (1, 0)
    assert empty.end_offset_for_epoch(1) == (-1, -1)


def test_epoch_for_offset_names_the_epoch_that_wrote_it() -> None:
    st_ = _epoch_state([(2, 0), (4, 10), (7, 25)], 30)
    assert [st_.epoch_for_offset(o) for o in (0, 9, 10, 24, 25, 29, 30)] == [2, 2, 4, 4, 7, 7, -1]
    assert _epoch_state([], 0).epoch_for_offset(0) == -1


def test_the_batch_index_costs_little_memory_beside_the_payloads() -> None:
    """Per committed batch the state keeps a few ints, not objects: a broker's memory grew
    ~850 B per entry per replica (tracemalloc), most of it BatchRefs and memoryviews here."""
    import gc
    import tracemalloc

    n = 5000
    body = _batch(1, 1000)
    hs = parse_batches(body)
    payloads = [bytes(rewrite_batches(body, hs, k, 1, prefix=pmod.RECORDS_PREFIX)) for k in range(n)]
    state = pmod.PartitionState()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i, data in enumerate(payloads, start=1):
            pmod.apply(state, index=i, term=1, data=data)
        gc.collect()
        grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert state.next_offset == n
    assert grown / n < 150, f"{grown / n:.0f} bytes per batch"

"""Checkpoints of a partition's applied state: a restart applies only the log's tail.

A state restored from a checkpoint and then given the tail must be the state a full replay
builds (offsets, producer windows, open and aborted transactions, reads of old offsets);
a checkpoint the log no longer vouches for (ahead of it, of another term, damaged) is
discarded with a warning and the full replay gives the right state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker import checkpoint
from logquake.broker import partition as pmod
from logquake.broker.batches import control_batch
from logquake.broker.metadata import PartitionInfo
from logquake.broker.raft import HardState, RaftConfig, RaftNode
from logquake.broker.records import batches_span, parse_batches, rewrite_batches
from logquake.broker.replica import PartitionReplica
from logquake.broker.storage import OpenFiles
from logquake.broker.storage_adapter import GroupStore
from tests.broker.conftest import leading_partition, one_node_config


def _data(pid: int, epoch: int, seq: int, n: int, ts: int, *, txn: bool) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=txn, producer_id=pid,
                                  producer_epoch=epoch if pid >= 0 else -1, base_sequence=seq if pid >= 0 else -1,
                                  batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=ts + i, key=None, value=b"v%d" % (ts + i), headers=[])
    return bytes(b.build())


# One step of a producer mix: (kind, producer 0-3, record count). Kinds: 0 plain, 1 idempotent,
# 2 transactional, 3 commit marker, 4 abort marker, 5 a leader's no-op entry, 6 a term bump.
_steps = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=60)


def _log(steps: list[tuple[int, int, int]]) -> list[tuple[int, bytes]]:
    """The committed log (term, payload) a leader writes for `steps`, offsets assigned."""
    log: list[tuple[int, bytes]] = []
    term, leo, seqs = 1, 0, [0, 0, 0, 0]
    for kind, p, n in steps:
        if kind == 6:
            term += 1
            continue
        if kind == 5:
            log.append((term, b""))
            continue
        pid = 100 + p
        if kind == 0:
            body = _data(-1, -1, -1, n, 1000 + leo, txn=False)
        elif kind in (1, 2):
            body = _data(pid, 0, seqs[p], n, 1000 + leo, txn=kind == 2)
            seqs[p] += n
        else:
            body = control_batch(commit=kind == 3, producer_id=pid, producer_epoch=0, timestamp_ms=1000 + leo)
        hs = parse_batches(body)
        log.append((term, bytes(rewrite_batches(body, hs, leo, term, prefix=pmod.RECORDS_PREFIX))))
        leo += batches_span(hs)
    return log


def _state(log: list[tuple[int, bytes]], upto: int, window: int | None, start: pmod.PartitionState | None = None
           ) -> pmod.PartitionState:
    """`log`'s first `upto` entries applied (from `start`, at its index), holding `window`
    bytes of payloads and reading older ones back from `log`."""
    st_ = start or pmod.PartitionState()
    st_.payload_window, st_.sample_bytes = window, 64
    st_.loader = lambda lo, hi: [data for _, data in log[lo - 1 : hi - 1]]
    for i in range(st_.applied_index + 1, upto + 1):
        term, data = log[i - 1]
        pmod.apply(st_, index=i, term=term, data=data)
    return st_


def assert_same(got: pmod.PartitionState, want: pmod.PartitionState) -> None:
    """Everything a replica serves from its state."""
    assert (got.applied_index, got.last_term, got.next_offset, got.log_start_offset) == (
        want.applied_index, want.last_term, want.next_offset, want.log_start_offset)
    assert got.epochs == want.epochs
    assert got.producers == want.producers
    assert got.txns == want.txns and got.txns.aborted == want.txns.aborted
    assert got.last_stable_offset == want.last_stable_offset
    assert got.batches == want.batches
    leo = want.next_offset
    for offset in range(leo + 1):
        assert got.read(offset, leo, 1 << 20, first=True) == want.read(offset, leo, 1 << 20, first=True)
        assert got.read(offset, leo, 150, first=False) == want.read(offset, leo, 150, first=False)
        assert got.batches_from(offset, 3) == want.batches_from(offset, 3)
    assert got.max_timestamp() == want.max_timestamp()
    assert got.offset_for_timestamp(1000 + leo // 2) == want.offset_for_timestamp(1000 + leo // 2)


@settings(max_examples=150, deadline=None)
@given(_steps, st.data())
def test_a_checkpoint_plus_the_tail_is_the_full_replay(steps, data) -> None:  # noqa: ANN001
    log = _log(steps)
    cut = data.draw(st.integers(0, len(log)), label="checkpoint index")
    window = data.draw(st.sampled_from([None, 0, 300, 2000]), label="payload window")
    want = _state(log, len(log), window)
    before = _state(log, cut, window)
    restored = checkpoint.decode(checkpoint.encode(before))
    assert restored.applied_index == cut and restored.payload_bytes == 0
    got = _state(log, len(log), window, restored)
    assert_same(got, want)
    # Encoding leaves the state it copies as it was: it goes on applying as if never checkpointed.
    assert_same(_state(log, len(log), window, before), want)


def test_a_checkpoint_keeps_transactions_open_across_it() -> None:
    steps = [(2, 0, 2), (2, 1, 1), (1, 2, 3), (4, 1, 1), (5, 0, 1), (2, 0, 1), (3, 0, 1)]
    log = _log(steps)
    before = _state(log, 4, 0)  # producer 100's transaction open, 101's aborted
    assert before.txns.open == {100: 0} and [a.producer_id for a in before.txns.aborted] == [101]
    restored = checkpoint.decode(checkpoint.encode(before))
    assert restored.last_stable_offset == 0
    got = _state(log, len(log), 0, restored)
    assert_same(got, _state(log, len(log), None))
    assert not got.txns.open


# ---- a replica restarting over its store -------------------------------------------------------


def _batch(k: int) -> bytes:
    return _data(7, 0, k, 1, 1000 + k, txn=False)


def _open(path: Path, *, every: int = 10**9) -> tuple[RaftNode, GroupStore, PartitionReplica, int]:
    """A one-replica partition over `path`, as Node._make_raft opens it; (.., entries the
    restart applied)."""
    store = GroupStore(path, "never", OpenFiles())
    store.checkpoints.every_entries = every
    hs, runs, tail = store.load(16 << 10)
    state = store.load_checkpoint()
    raft = RaftNode(group="p1", node_id=1, voters=(1,), config=RaftConfig(log_window_bytes=16 << 10),
                    rng=random.Random(0), hard_state=hs, entries=tail, term_runs=runs, reader=store.read,
                    payload_reader=store.read_payloads, applied=state.applied_index if state else 0)
    rep = PartitionReplica(PartitionInfo(topic="t", partition=0, group_id=1, replicas=(1,)), raft, store,
                           state=state)
    return raft, store, rep, _run(raft, store, rep)


def _run(raft: RaftNode, store: GroupStore, rep: PartitionReplica) -> int:
    applied = 0
    while raft.has_ready():
        rd = raft.ready()
        store.append(rd.entries, rd.hard_state)
        rep.apply_ready(rd)
        applied += len(rd.committed)
        raft.advance(rd)
    return applied


def _write(path: Path, n: int, *, every: int = 10**9) -> tuple[GroupStore, PartitionReplica]:
    raft, store, rep, _ = _open(path, every=every)
    raft.campaign()
    _run(raft, store, rep)
    for k in range(n):
        b = _batch(k)
        assert rep.append(b, parse_batches(b), 0).error_code == 0
        _run(raft, store, rep)
    return store, rep


def _full_replay(path: Path) -> pmod.PartitionState:
    store = GroupStore(path, "never", OpenFiles())
    hs, runs, tail = store.load(16 << 10)
    assert hs is not None
    hs = HardState(hs.term, hs.vote, tail[-1].index)  # all of it, whatever commit index was on disk
    raft = RaftNode(group="p1", node_id=1, voters=(1,), config=RaftConfig(log_window_bytes=16 << 10),
                    rng=random.Random(0), hard_state=hs, entries=tail, term_runs=runs, reader=store.read,
                    payload_reader=store.read_payloads)
    rep = PartitionReplica(PartitionInfo(topic="t", partition=0, group_id=1, replicas=(1,)), raft,
                           GroupStore(path / "elsewhere", "never", OpenFiles()))
    _run(raft, store, rep)
    return rep.state  # its store stays open (no checkpoint written): it reads the old batches


def test_a_crashed_replica_applies_only_the_entries_after_its_last_checkpoint(tmp_path: Path) -> None:
    store, rep = _write(tmp_path, 2500, every=1000)
    last = rep.raft.last_index
    store.checkpoints._wait()  # noqa: SLF001 - the background write done; then a crash: no close
    written = store.checkpoints.written_index
    assert 0 < written < last
    raft, store2, rep2, applied = _open(tmp_path)
    raft.campaign()  # the commit index on disk lags (written lazily): a new leader commits the rest
    applied += _run(raft, store2, rep2)
    # Before: all of them (2502) again.
    assert raft.applied_index == last + 1 and applied == last + 1 - written
    assert_same(rep2.state, _full_replay(tmp_path))
    store2.close()


def test_a_cleanly_stopped_replica_applies_nothing_again(tmp_path: Path) -> None:
    store, rep = _write(tmp_path, 300)
    store.close()
    want = _full_replay(tmp_path)
    raft, store, rep, applied = _open(tmp_path)
    assert applied == 0 and raft.applied_index == want.applied_index
    assert_same(rep.state, want)
    raft.campaign()  # and it goes on: a new term's no-op, then more records
    _run(raft, store, rep)
    b = _batch(300)
    assert rep.append(b, parse_batches(b), 0).error_code == 0
    _run(raft, store, rep)
    assert rep.state.next_offset == 301 and rep.state.read(0, 301, 1 << 20, first=True).count(b"v1") > 0
    store.close()


def _segment(path: Path) -> Path:
    (seg,) = path.glob("*.seg")
    return seg


@pytest.mark.parametrize("damage", ["ahead of the log", "another term", "corrupt", "truncated", "version"])
def test_a_checkpoint_the_log_does_not_vouch_for_is_discarded(tmp_path: Path, damage: str, caplog) -> None:  # noqa: ANN001
    store, rep = _write(tmp_path, 400)
    store.close()
    ck = tmp_path / checkpoint.FILE
    if damage == "ahead of the log":  # a torn tail cut the log below the checkpoint's index
        seg = _segment(tmp_path)
        os.truncate(seg, seg.stat().st_size - 30)
    elif damage == "another term":  # an unclean election replaced the entry at its index
        st_ = checkpoint.decode(ck.read_bytes())
        st_.last_term += 1
        ck.write_bytes(checkpoint.encode(st_))
    elif damage == "corrupt":
        raw = bytearray(ck.read_bytes())
        raw[len(raw) // 2] ^= 0x40
        ck.write_bytes(bytes(raw))
    elif damage == "truncated":
        ck.write_bytes(ck.read_bytes()[:-5])
    else:
        ck.write_bytes(ck.read_bytes()[:4] + b"\x09\x00\x00\x00" + ck.read_bytes()[8:])
    want = _full_replay(tmp_path)
    with caplog.at_level(logging.WARNING, logger="logquake.broker.checkpoint"):
        raft, store, rep, applied = _open(tmp_path)
    assert any("discarded, replaying the whole log" in r.getMessage() for r in caplog.records)
    assert not ck.exists()
    assert applied == want.applied_index
    assert_same(rep.state, want)
    store.close()


# ---- the broker ---------------------------------------------------------------------------------


async def _produce(cfg, n: int) -> int:  # noqa: ANN001
    async with leading_partition(cfg, new_topic="t") as (node, rep):
        futs = []
        for k in range(n):
            b = _batch(k)
            futs.append(rep.append(b, parse_batches(b), -1))
        node.kick()
        assert all(o.error_code == 0 for o in await asyncio.gather(*futs))
        return rep.raft.applied_index


async def _restart(cfg, monkeypatch) -> tuple[int, int]:  # noqa: ANN001
    """Restart the node; (entries its partition applied, its applied index once caught up)."""
    applied = []
    real = pmod.apply
    monkeypatch.setattr(pmod, "apply", lambda st_, **kw: applied.append(kw["index"]) or real(st_, **kw))
    async with leading_partition(cfg) as (_, rep):
        assert rep.state.next_offset == 2000
    return len(applied), rep.raft.applied_index


def test_a_restarted_broker_applies_only_what_its_partitions_wrote_since_they_stopped(tmp_path: Path,
                                                                                      monkeypatch) -> None:  # noqa: ANN001
    cfg = one_node_config(tmp_path)
    last = asyncio.run(_produce(cfg, 2000))
    assert last > 2000
    applied, now = asyncio.run(_restart(cfg, monkeypatch))
    # Before: every entry of the log again (2000 and more); now the new term's no-op alone.
    assert applied == now - last == 1

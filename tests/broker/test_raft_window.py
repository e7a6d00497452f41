"""The Raft log's payload window: older entries leave memory and are read back in ranges.

RaftNode keeps every term but only the newest `log_window_bytes` of payloads; the rest it reads
through its `reader` (SegmentLog.read: one pread per segment a range spans). PartitionState
trims batch payloads the same way and reads them back through the Raft log, one load a fetch.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker import partition as pmod
from logquake.broker.metadata import PartitionInfo
from logquake.broker.raft import ENTRY_COST, Entry, HardState, RaftConfig, RaftNode
from logquake.broker.raftsim import Sim, heal_and_commit, run_many, run_schedule, unsafe
from logquake.broker.records import batches_span, parse_batches, rewrite_batches
from logquake.broker.replica import PartitionReplica
from logquake.broker.storage import OpenFiles, SegmentLog
from logquake.broker.storage_adapter import GroupStore
from tests.broker.test_raftsim import CONFIGS, assert_safe


class ListDisk:
    """A persisted log in a list, read as SegmentLog.read reads: a prefix capped by bytes
    (counting `overhead` more per entry, as a store counting its record headers may)."""

    def __init__(self, overhead: int = 0) -> None:
        self.log: list[Entry] = []
        self.reads: list[tuple[int, int, int | None]] = []
        self.overhead = overhead

    def read(self, lo: int, hi: int, max_bytes: int | None) -> list[Entry]:
        self.reads.append((lo, hi, max_bytes))
        assert 1 <= lo < hi <= len(self.log) + 1, (lo, hi, len(self.log))
        out = self.log[lo - 1 : hi - 1]
        if max_bytes is not None:
            for k, e in enumerate(out):
                max_bytes -= len(e.data) + self.overhead
                if max_bytes <= 0:
                    return out[: k + 1]
        return out


def drive(r: RaftNode, disk: ListDisk) -> list[Entry]:
    """A one-node shell: persist each Ready to `disk`, return what was committed."""
    out: list[Entry] = []
    while r.has_ready():
        rd = r.ready()
        if rd.entries:
            del disk.log[rd.entries[0].index - 1 :]
            disk.log.extend(rd.entries)
        out.extend(rd.committed)
        r.advance(rd)
    return out


def single(window: int, disk: ListDisk, **kw) -> RaftNode:  # noqa: ANN003 - RaftNode's restart arguments
    cfg = RaftConfig(log_window_bytes=window, max_append_bytes=1000)
    return RaftNode(group="g", node_id=1, voters=(1,), config=cfg, rng=random.Random(0), reader=disk.read, **kw)


def test_config_rejects_a_negative_window_and_inflight_cap() -> None:
    with pytest.raises(ValueError, match="log_window_bytes"):
        RaftConfig(log_window_bytes=-1)
    with pytest.raises(ValueError, match="max_inflight_bytes"):
        RaftConfig(max_inflight_bytes=0)


def test_only_the_window_stays_in_memory_and_old_entries_read_back_whole() -> None:
    disk = ListDisk()
    r = single(1000, disk)
    r.campaign()
    for k in range(200):
        r.propose(b"%03d" % k + b"x" * 97)
        drive(r, disk)
    assert r.last_index == 201
    assert r.memory_bytes <= 1250 + 100  # the window, a quarter over it at most, one entry
    assert r.first_in_memory > 150
    disk.reads.clear()
    assert r.entries_from(1) == tuple(disk.log)  # all of it, in one read below the window
    assert len(disk.reads) == 1
    assert [r.term_at(i) for i in (0, 1, 201, 202)] == [0, 1, 1, None]


@pytest.mark.parametrize("overhead", [0, 24])
def test_entries_from_is_a_contiguous_prefix_when_the_byte_cap_cuts_below_the_window(overhead: int) -> None:
    disk = ListDisk(overhead)
    r = single(1000, disk)
    r.campaign()
    for k in range(100):
        r.propose(b"%03d" % k + b"x" * 97)
        drive(r, disk)
    first = r.first_in_memory
    assert first > 20
    for lo in (1, 2, first - 3, first - 1):
        for cap in (1, 250, 100 * (first - lo) - 50, 100 * (first - lo) + 250, 1 << 20):
            got = r.entries_from(lo, max_bytes=cap)
            assert got, (lo, cap)
            assert [e.index for e in got] == list(range(lo, lo + len(got))), (lo, cap)
            assert got == tuple(disk.log[lo - 1 : lo - 1 + len(got)])
            size = sum(len(e.data) for e in got)
            assert size - len(got[-1].data) < cap  # no more than the cap allows
            if not overhead:  # and, read as the window counts, no less
                assert size >= cap or got[-1].index == r.last_index, (lo, cap, size)


@pytest.mark.parametrize("window", [1000, 0])
def test_a_restart_replays_a_window_per_ready_and_commits_it_all(window: int) -> None:
    disk = ListDisk()
    r = single(window, disk)
    r.campaign()
    for k in range(100):
        r.propose(b"%03d" % k + b"x" * 97)
        drive(r, disk)
    r2 = single(window, disk, entries=disk.log[-5:], term_runs=[(1, 1)], hard_state=HardState(1, 1, 101))
    assert r2.memory_bytes <= 5 * (100 + ENTRY_COST) and r2.last_index == 101
    disk.reads.clear()
    r2.campaign()
    replayed: list[Entry] = []
    sizes = []
    while r2.has_ready():
        rd = r2.ready()
        sizes.append(sum(len(e.data) for e in rd.committed))
        if rd.entries:
            del disk.log[rd.entries[0].index - 1 :]
            disk.log.extend(rd.entries)
        replayed.extend(rd.committed)
        r2.advance(rd)
    assert replayed == disk.log
    # A window's worth (at least max_append_bytes, 1000) per Ready and per read: never one
    # read per entry, even with no window at all.
    assert max(sizes) <= 1000 + 100
    assert len(disk.reads) <= 11, disk.reads


def test_a_leader_caps_the_bytes_in_flight_to_a_follower() -> None:
    cfg = RaftConfig(max_inflight_bytes=1000, max_append_bytes=300, max_inflight=64)
    sim = Sim(n=3, seed=1, config=cfg)
    sim.run_until(lambda: sim.leader() is not None, 200)
    sim.stabilize()
    lead = sim.leader()
    assert lead is not None
    follower = next(i for i in sim.ids if i != lead)
    sim.pause(follower)  # its acks stop; the leader keeps sending until the cap
    for _ in range(100):
        sim.propose(b"x" * 100)
    sim.run(3)
    waiting = sim.paused[follower] + [m for _, _, m in sim.queue if m.to == follower]
    assert sum(len(e.data) for m in waiting for e in m.entries) <= 1000 + 300  # not the 10,000 proposed
    sim.resume(follower)
    assert heal_and_commit(sim, b"end", 400)
    sim.check_logs()
    assert not sim.violations, sim.violations


# ---- PartitionState: trimmed payloads read back through a loader -------------------------------


def _batch(k: int, n: int = 1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1000 + k, key=None, value=b"v%d-%d" % (k, i), headers=[])
    return bytes(b.build())


def _log_of(sizes: list[list[int]]) -> list[Entry]:
    log, leo = [], 0
    for k, ns in enumerate(sizes):
        if not ns:
            log.append(Entry(1, k + 1, b""))
            continue
        body = b"".join(_batch(k, n) for n in ns)
        hs = parse_batches(body)
        log.append(Entry(1, k + 1, bytes(rewrite_batches(body, hs, leo, 1, prefix=pmod.RECORDS_PREFIX))))
        leo += batches_span(hs)
    return log


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(1, 4), max_size=3), min_size=1, max_size=40),
       st.integers(0, 600), st.sampled_from([1, 150, 600, 4096]), st.data())
def test_a_trimmed_partition_reads_what_an_untrimmed_one_reads(sizes, window, sample_bytes, data) -> None:
    """Batches out of the window are indexed only by a sample per `sample_bytes` of them: every
    read gives what a partition holding every payload gives, in one load."""
    log = _log_of(sizes)
    loads: list[tuple[int, int]] = []

    def loader(lo: int, hi: int) -> list[bytes]:
        loads.append((lo, hi))
        return [e.data for e in log[lo - 1 : hi - 1]]

    full = pmod.PartitionState()
    trimmed = pmod.PartitionState(payload_window=window, loader=loader, sample_bytes=sample_bytes)
    for e in log:
        for st_ in (full, trimmed):
            pmod.apply(st_, index=e.index, term=e.term, data=e.data)
        if data.draw(st.booleans()):  # an idle group lets every payload go, at any point
            trimmed.trim(0)
    assert trimmed.payload_bytes <= window + (window >> 2) + max(len(e.data) for e in log)
    assert trimmed.batches == full.batches
    leo = full.next_offset
    for _ in range(8):
        offset, upto = data.draw(st.integers(0, leo)), data.draw(st.integers(0, leo + 1))
        max_bytes, first = data.draw(st.integers(-10, 2000)), data.draw(st.booleans())
        loads.clear()
        assert trimmed.read(offset, upto, max_bytes, first=first) == full.read(offset, upto, max_bytes, first=first)
        assert len(loads) <= 1  # one load per read, however many batches it spans
        # readable below the rows counts from the sample before `offset` to the one after
        # `upto`: never less, at most two blocks (a sample's bytes and an entry) more
        exact, counted = full.readable(offset, upto), trimmed.readable(offset, upto)
        assert exact <= counted <= exact + 2 * (sample_bytes + max(len(e.data) for e in log))
        assert (counted > 0) == (exact > 0)
        limit = data.draw(st.integers(1, 5))
        got = trimmed.batches_from(offset, limit)
        assert got and got == full.batches_from(offset, limit) or offset >= leo
        ts = data.draw(st.integers(900, 1100))
        assert trimmed.offset_for_timestamp(ts) == full.offset_for_timestamp(ts)
    assert trimmed.max_timestamp() == full.max_timestamp()


def _partition_node(tmp_path: Path, window: int, *, segment_bytes: int = 64 << 10) -> tuple[RaftNode, GroupStore,
                                                                                         PartitionReplica]:
    store = GroupStore(tmp_path, "never", OpenFiles())
    store._log.segment_bytes = segment_bytes  # noqa: SLF001 - several segments for a small test
    hs, runs, tail = store.load(window)
    raft = RaftNode(group="p1", node_id=1, voters=(1,), config=RaftConfig(log_window_bytes=window),
                    rng=random.Random(0), hard_state=hs, entries=tail, term_runs=runs, reader=store.read,
                    payload_reader=store.read_payloads)
    rep = PartitionReplica(PartitionInfo(topic="t", partition=0, group_id=1, replicas=(1,)), raft, store)
    return raft, store, rep


def _run(raft: RaftNode, store: GroupStore, rep: PartitionReplica) -> None:
    while raft.has_ready():
        rd = raft.ready()
        store.append(rd.entries, rd.hard_state)
        rep.apply_ready(rd)
        raft.advance(rd)


def test_a_fetch_of_many_trimmed_batches_is_one_pread_per_segment(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    raft, store, rep = _partition_node(tmp_path, 16 << 10)
    raft.campaign()
    _run(raft, store, rep)
    batches = [_batch(k) for k in range(5000)]
    for b in batches:  # one single-record batch per entry, as the soak's producers write
        assert rep.append(b, parse_batches(b), 0).error_code == 0
        _run(raft, store, rep)
    st_ = rep.state
    assert st_.next_offset == 5000
    assert st_.payload_bytes <= (20 << 10) + 200 and raft.memory_bytes <= (20 << 10) + 200
    segments = len(list(tmp_path.glob("*.seg")))
    assert segments >= 4
    preads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: preads.append(n) or real(fd, n, off))
    got = st_.read(0, st_.next_offset, 1 << 30, first=True)
    monkeypatch.undo()
    assert len(preads) <= segments, f"{len(preads)} preads for a fetch of 5000 batches in {segments} segments"
    # The batches written, in order, with their offsets assigned (base offset and leader
    # epoch, the first 16 bytes, are rewritten at append; the rest is as the client sent it).
    hs = parse_batches(got)
    assert [int.from_bytes(got[h.start : h.start + 8], "big") for h in hs] == list(range(5000))
    assert [got[h.start + 16 : h.start + h.length] for h in hs] == [b[16:] for b in batches]
    store.close()


def test_a_restarted_partition_loads_its_window_and_serves_old_offsets(tmp_path: Path) -> None:
    raft, store, rep = _partition_node(tmp_path, 16 << 10)
    raft.campaign()
    _run(raft, store, rep)
    for k in range(3000):
        b = _batch(k)
        rep.append(b, parse_batches(b), 0)
        _run(raft, store, rep)
    before = rep.state.read(0, 3000, 1 << 30, first=True)
    store.close()
    raft, store, rep = _partition_node(tmp_path, 16 << 10)
    assert raft.memory_bytes <= (16 << 10) + 200 and raft.first_in_memory > 2000
    raft.campaign()
    _run(raft, store, rep)  # replays the log a window per Ready, trimming as it goes
    assert rep.state.next_offset == 3000
    assert rep.state.payload_bytes <= (20 << 10) + 200 and raft.memory_bytes <= (20 << 10) + 200
    assert rep.state.read(0, 3000, 1 << 30, first=True) == before
    store.close()


# ---- the simulation with windows small enough to trim all the time --------------------------------


def _windowed(kwargs: dict, window: int) -> dict:
    cfg = kwargs.get("config", RaftConfig())
    return {**kwargs, "config": replace(cfg, log_window_bytes=window)}


@pytest.mark.parametrize(("name", "window"), [(name, 64) for name in sorted(CONFIGS)] + [("default", 0)])
def test_random_schedules_with_a_tiny_window(name: str, window: int) -> None:
    results = run_many(range(50), **_windowed(CONFIGS[name], window))
    assert_safe(results)
    assert sum(r.reads for r in results) > len(results)  # followers and restarts did read back
    assert sum(r.committed for r in results) > 10 * len(results)


def test_unclean_elections_truncate_below_the_window_and_the_oracle_still_sees_the_loss() -> None:
    # With window 0 a truncation of committed entries cuts into what was only on disk.
    results = run_many(range(60), config=unsafe(RaftConfig(log_window_bytes=0)))
    assert sum(r.committed_truncations for r in results) > 0
    assert any("committed entry" in v for r in results for v in r.violations)


def test_disk_backed_schedules_with_a_tiny_window(tmp_path: Path) -> None:
    results = [run_schedule(s, crash_in_ready=0.03, disk=tmp_path / str(s), config=RaftConfig(log_window_bytes=64))
               for s in range(10)]
    assert_safe(results)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_thousands_of_schedules_with_a_tiny_window(name: str) -> None:
    assert_safe(run_many(range(2000), **_windowed(CONFIGS[name], 64)))


def test_segment_log_reads_ranges_and_payloads_across_segments(tmp_path: Path) -> None:
    rng = random.Random(7)
    log = [Entry(1 + i // 50, i + 1, bytes([i % 256]) * rng.randrange(0, 60)) for i in range(500)]
    with SegmentLog(tmp_path, segment_bytes=1000, fsync="never") as s:
        s.load()
        s.append(log[:200])
        s.append(log[200:])
        for _ in range(500):
            lo = rng.randrange(1, 501)
            hi = rng.randrange(lo + 1, 502)
            assert s.read(lo, hi) == log[lo - 1 : hi - 1]
            assert s.read_payloads(lo, hi) == [e.data for e in log[lo - 1 : hi - 1]]
            cap = rng.randrange(0, 400)
            got = s.read(lo, hi, cap)
            assert got == log[lo - 1 : lo - 1 + len(got)] and got
            size = sum(len(e.data) for e in got)
            assert len(got) == 1 or size - len(got[-1].data) < cap  # no more than the cap allows
            assert size >= cap or got[-1].index == hi - 1  # and no less
    with SegmentLog(tmp_path) as s:
        hs, runs, tail = s.load_window(300)
        assert runs == [(1 + 50 * t, 1 + t) for t in range(10)]
        held = [len(e.data) + ENTRY_COST for e in tail]  # counted as the Raft log counts its window
        assert tail == log[-len(tail):] and sum(held[1:]) < 300 <= sum(held)


def test_reads_beside_a_writer_thread_that_appends_rolls_and_truncates(tmp_path: Path) -> None:
    # As in a node: the writer thread appends (rolling segments, rewriting an uncommitted
    # suffix) while the event loop reads back committed entries, below `floor`.
    import threading

    s = SegmentLog(tmp_path, segment_bytes=2000, fsync="never")
    s.load()
    log = [Entry(1, i, b"%d" % i * 7) for i in range(1, 51)]
    s.append(log)
    floor = [50]
    errors: list[BaseException] = []
    done = threading.Event()
    stop = threading.Event()
    # A free-running writer can finish before the reader's first reads on a loaded machine
    # (CI once saw 9): each append waits for one read, so they overlap at any speed.
    read_done = threading.Semaphore(0)

    def writer() -> None:
        rng = random.Random(1)
        try:
            for term in range(2, 150):
                while not read_done.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                cut = rng.randrange(floor[0] + 1, len(log) + 2)  # rewrite only above the floor
                new = [Entry(term, i, b"t%d-%d" % (term, i) * 5) for i in range(cut, cut + rng.randrange(1, 30))]
                s.append(new)
                del log[cut - 1 :]
                log.extend(new)
                floor[0] = max(floor[0], len(log) - 20)  # the older ones are "committed" now
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    rng = random.Random(2)
    reads = 0
    try:
        while not done.is_set():
            hi = floor[0] + 1
            snapshot = log[: hi - 1]  # entries below the floor never change again
            lo = rng.randrange(1, hi)
            assert s.read(lo, hi) == snapshot[lo - 1 :]
            assert s.read_payloads(lo, hi) == [e.data for e in snapshot[lo - 1 :]]
            reads += 1
            read_done.release()
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert reads >= 148  # one read before each of the writer's 148 appends, at least
    s.close()


def test_a_trimmed_partition_holds_well_under_a_byte_a_batch_for_old_batches() -> None:
    """20,000 single-batch entries through a 4 KiB window: what the partition keeps for the
    batches out of it grows by under 2 bytes a batch (a row of 7 int64 columns, 56 bytes a
    batch for good, was most of a broker's growth through an hour of small transactions)."""
    import tracemalloc

    log = _log_of([[1]] * 20_000)
    st_ = pmod.PartitionState(payload_window=4096, loader=lambda lo, hi: [e.data for e in log[lo - 1 : hi - 1]])
    for e in log[:1000]:  # past the first trims and the columns' first growth
        pmod.apply(st_, index=e.index, term=e.term, data=e.data)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for e in log[1000:]:
            pmod.apply(st_, index=e.index, term=e.term, data=e.data)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown / 19_000 < 2, f"{grown / 19_000:.1f} bytes a batch"
    assert st_.read(0, 3, 1 << 20, first=True) == b"".join(_log_of([[1]] * 3)[k].data[1:] for k in range(3))


def test_a_partition_replica_grows_by_a_few_bytes_an_entry_past_its_window(tmp_path: Path) -> None:
    """Raft log, segment log and partition state together, as a node runs them: 20,000
    idempotent single-record entries through a 16 KiB window leave under 8 bytes an entry in
    memory (64 before: a row per batch and a position per entry, for the log's life)."""
    import tracemalloc

    def batch(k: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=7,
                                      producer_epoch=0, base_sequence=k, batch_size=1 << 20)
        b.append(0, timestamp=1000 + k, key=None, value=b"v" * 60, headers=[])
        return bytes(b.build())

    raft, store, rep = _partition_node(tmp_path, 16 << 10)
    raft.campaign()
    _run(raft, store, rep)
    batches = [batch(k) for k in range(25_000)]

    def write(a: int, b: int) -> None:
        for k in range(a, b):
            assert rep.append(batches[k], parse_batches(batches[k]), 0).error_code == 0
            _run(raft, store, rep)

    write(0, 5000)  # past the first trims and the first growth of every structure
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        write(5000, 25_000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown / 20_000 < 8, f"{grown / 20_000:.1f} bytes an entry"
    assert rep.state.read(0, 1, 1 << 20, first=True)[16:] == batches[0][16:]  # still read back
    store.close()


def test_a_window_of_small_entries_holds_about_its_size(tmp_path: Path) -> None:
    """With 80-byte entries, what a replica holds for its windows (the Raft log's Entries and
    the partition's rows, and the payloads of both) stays within 2.5 times the window: each
    entry counts ENTRY_COST (and each row ROW_COST) beside its payload. Counting payloads
    alone, a 64 KiB window held 6.9 times that."""
    import tracemalloc

    window = 64 << 10
    raft, store, rep = _partition_node(tmp_path, window)
    raft.campaign()
    _run(raft, store, rep)
    batches = [_batch(k) for k in range(3000)]  # ~80 bytes each: 3 windows' worth of payloads
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for b in batches:
            assert rep.append(b, parse_batches(b), 0).error_code == 0
            _run(raft, store, rep)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert raft.first_in_memory > 1000  # the window was trimmed
    assert held <= 2.5 * window, f"{held / window:.1f} windows held"
    store.close()

"""SegmentLog on a real filesystem: round trips, torn and corrupt tails, hard state, bad directories."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logquake.broker.raft import ENTRY_COST, Entry, HardState, RaftNode
from logquake.broker.storage import DirLock, OpenFiles, SegmentLog, StorageError


def ents(first: int, last: int, term: int = 1, size: int = 100) -> list[Entry]:
    return [Entry(term, i, bytes([i % 256]) * size) for i in range(first, last + 1)]


def reopen(d: Path, **kw) -> tuple[HardState | None, list[Entry]]:  # noqa: ANN003
    s = SegmentLog(d, **kw)
    try:
        return s.load()
    finally:
        s.close()


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("*.seg"))


def test_round_trip_across_segments(tmp_path: Path) -> None:
    with SegmentLog(tmp_path, segment_bytes=1000) as s:
        assert s.load() == (None, [])
        for k in range(10):
            s.append(ents(10 * k + 1, 10 * k + 10))
        s.append([Entry(2, 101, b""), Entry(2, 102, b"x" * 70000)])
        assert s.last_index == 102
    assert len(segments(tmp_path)) > 5
    hs, got = reopen(tmp_path)
    assert hs is None
    assert got == ents(1, 100) + [Entry(2, 101, b""), Entry(2, 102, b"x" * 70000)]


def test_append_replaces_a_conflicting_suffix_even_across_segments(tmp_path: Path) -> None:
    with SegmentLog(tmp_path, segment_bytes=500) as s:
        s.load()
        for k in range(6):
            s.append(ents(5 * k + 1, 5 * k + 5))
        before = len(segments(tmp_path))
        s.append(ents(8, 9, term=2))
        assert s.last_index == 9
        assert len(segments(tmp_path)) < before
        s.append(ents(10, 12, term=2))
        s.append(ents(6, 6, term=3))  # cuts inside a segment
        with pytest.raises(ValueError):
            s.append(ents(9, 9))  # a gap
    _, got = reopen(tmp_path)
    assert got == ents(1, 5) + ents(6, 6, term=3)


def test_hard_state_is_durable_at_once_and_commit_at_close(tmp_path: Path) -> None:
    s = SegmentLog(tmp_path, fsync="never")
    s.load()
    s.save_hard_state(HardState(3, 2, 0))
    raw = (tmp_path / "hardstate").read_bytes()  # on disk before close, whatever the policy
    s.save_hard_state(HardState(3, 2, 7))  # commit only: deferred
    assert (tmp_path / "hardstate").read_bytes() == raw
    s.save_hard_state(HardState(4, None, 7))
    s.close()
    assert reopen(tmp_path) == (HardState(4, None, 7), [])
    s = SegmentLog(tmp_path)
    s.load()
    s.save_hard_state(HardState(4, None, 9))
    s.close()
    assert reopen(tmp_path)[0] == HardState(4, None, 9)


def test_leftover_temp_file_from_a_crashed_save_is_ignored(tmp_path: Path) -> None:
    with SegmentLog(tmp_path) as s:
        s.load()
        s.save_hard_state(HardState(5, 1, 0))
    (tmp_path / "hardstate.tmp").write_bytes(b"half")
    assert reopen(tmp_path)[0] == HardState(5, 1, 0)
    assert not (tmp_path / "hardstate.tmp").exists()


def test_torn_tail_is_truncated_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with SegmentLog(tmp_path) as s:
        s.load()
        s.append(ents(1, 20))
    (seg,) = segments(tmp_path)
    size = seg.stat().st_size
    os.truncate(seg, size - 30)  # the last record lost its end, as in a crash mid-write
    with caplog.at_level(logging.WARNING, logger="logquake.broker.storage"):
        _, got = reopen(tmp_path)
    assert got == ents(1, 19)
    assert "torn record" in caplog.text and "truncating" in caplog.text
    assert seg.stat().st_size == size - 124  # cut at the record boundary: 24-byte header + 100 data
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert reopen(tmp_path)[1] == ents(1, 19)
    assert caplog.text == ""  # repaired once, clean after
    with SegmentLog(tmp_path) as s:
        s.load()
        s.append(ents(20, 21, term=2))  # and appendable after repair
    assert reopen(tmp_path)[1] == ents(1, 19) + ents(20, 21, term=2)


def test_torn_header_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with SegmentLog(tmp_path) as s:
        s.load()
        s.append(ents(1, 3))
    (seg,) = segments(tmp_path)
    with open(seg, "ab") as f:
        f.write(b"\x07\x00")
    assert reopen(tmp_path)[1] == ents(1, 3)
    assert "torn record header" in caplog.text


def test_corrupt_crc_truncates_there_and_drops_later_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SegmentLog(tmp_path, segment_bytes=600) as s:
        s.load()
        for k in range(6):
            s.append(ents(5 * k + 1, 5 * k + 5))
    segs = segments(tmp_path)
    assert len(segs) >= 3
    victim = segs[1]
    data = bytearray(victim.read_bytes())
    data[124 * 2 + 24 + 50] ^= 0xFF  # a payload byte of the victim's third entry
    victim.write_bytes(bytes(data))
    first = int(victim.name.split(".")[0])
    _, got = reopen(tmp_path)
    assert got == ents(1, first + 1)
    assert "CRC mismatch" in caplog.text and "removing segment" in caplog.text
    assert segments(tmp_path) == segs[:2]


def test_random_tail_damage_always_leaves_a_valid_prefix(tmp_path: Path) -> None:
    rng = random.Random(3)
    want = ents(1, 30, size=37)
    for trial in range(20):
        d = tmp_path / str(trial)
        with SegmentLog(d) as s:
            s.load()
            s.append(want)
        (seg,) = segments(d)
        data = bytearray(seg.read_bytes())
        cut = rng.randrange(len(data))
        if trial % 2:
            data = data[:cut]
        else:
            data[cut] ^= 1 << rng.randrange(8)
        seg.write_bytes(bytes(data))
        _, got = reopen(d)
        assert got == want[: len(got)]
        assert len(got) < len(want)


def test_bad_directories_are_clear_errors(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StorageError, match="not a directory"):
        SegmentLog(f)
    with pytest.raises(StorageError, match="cannot use data directory"):
        SegmentLog(f / "sub")
    with SegmentLog(tmp_path / "d") as s:
        with pytest.raises(StorageError, match="in use by another process"):
            SegmentLog(tmp_path / "d")
        with pytest.raises(RuntimeError, match="load"):
            s.append(ents(1, 1))
    (tmp_path / "d" / "junk.seg").write_bytes(b"")
    with pytest.raises(StorageError, match="not a segment file name"):
        reopen(tmp_path / "d")
    with pytest.raises(ValueError, match="fsync"):
        SegmentLog(tmp_path / "e", fsync="sometimes")


def test_corrupt_hard_state_is_a_clear_error(tmp_path: Path) -> None:
    with SegmentLog(tmp_path) as s:
        s.load()
        s.save_hard_state(HardState(2, 1, 0))
    raw = bytearray((tmp_path / "hardstate").read_bytes())
    raw[10] ^= 1
    (tmp_path / "hardstate").write_bytes(bytes(raw))
    with pytest.raises(StorageError, match="corrupt"):
        reopen(tmp_path)


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_raft_node_restarts_from_segment_log(tmp_path: Path, policy: str) -> None:
    def start(s: SegmentLog) -> RaftNode:
        hs, log = s.load()
        return RaftNode(group="g", node_id=1, voters=(1,), rng=random.Random(0), hard_state=hs, entries=log)

    s = SegmentLog(tmp_path, fsync=policy)
    r = start(s)
    r.campaign()
    applied = []
    for k in range(5):
        r.propose(b"v%d" % k)
        while r.has_ready():
            rd = r.ready()
            s.append(rd.entries)
            if rd.hard_state:
                s.save_hard_state(rd.hard_state)
            s.sync()
            applied.extend(rd.committed)
            r.advance(rd)
    s.close()
    s = SegmentLog(tmp_path, fsync=policy)
    r2 = start(s)
    assert (r2.term, r2.vote, r2.last_index) == (1, 1, 6)
    assert r2.ready().committed == tuple(applied)
    s.close()


def test_sync_from_a_worker_thread_while_appending_and_truncating(tmp_path: Path) -> None:
    import threading

    s = SegmentLog(tmp_path, fsync="interval", segment_bytes=4000)
    s.load()
    stop = threading.Event()
    errors: list[BaseException] = []

    def syncer() -> None:
        while not stop.is_set():
            try:
                s.sync()
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
                return

    t = threading.Thread(target=syncer)
    t.start()
    try:
        want: list[Entry] = []
        for k in range(200):
            first = max(1, len(want) - (k % 3))  # every third round rewrites a short suffix
            batch = ents(first, first + 2, term=k + 1, size=50)
            s.append(batch, sync=False)
            want = want[: first - 1] + batch
    finally:
        stop.set()
        t.join()
    s.close()
    assert not errors
    assert reopen(tmp_path)[1] == want


def _open_under(root: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(root))
        except OSError:
            pass
    return n


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_logs_sharing_open_files_hold_few_descriptors_and_lose_nothing(tmp_path: Path, policy: str) -> None:
    lock = DirLock(tmp_path)
    with pytest.raises(StorageError, match="in use by another process"):
        DirLock(tmp_path)
    files = OpenFiles(capacity=8)
    logs = [SegmentLog(tmp_path / f"g{k}", fsync=policy, lock=False, files=files, segment_bytes=300)
            for k in range(100)]
    for s in logs:
        s.load()
    assert _open_under(tmp_path) == 1  # the lock alone: nothing is opened before a write
    for rnd in range(3):  # each round reopens every log's segment (rolling, rewriting a suffix)
        for s in logs:
            s.append(ents(max(1, rnd * 2), rnd * 2 + 2, term=rnd + 1), sync=False)
        for s in logs:
            s.sync()
        assert _open_under(tmp_path) <= 1 + 8
    idle = OpenFiles(capacity=8, idle_s=0.0)  # idle at once: only the log being written stays open
    s0 = SegmentLog(tmp_path / "i0", fsync=policy, lock=False, files=idle)
    s1 = SegmentLog(tmp_path / "i1", fsync=policy, lock=False, files=idle)
    for s in (s0, s1):
        s.load()
        s.append(ents(1, 1))
    assert len(idle) == 1
    for s in [*logs, s0, s1]:
        s.close()
    lock.close()
    assert _open_under(tmp_path) == 0
    want = ents(1, 1, term=1) + ents(2, 3, term=2) + ents(4, 6, term=3)
    for k in range(100):
        assert reopen(tmp_path / f"g{k}")[1] == want


def _traced_growth(make) -> int:  # noqa: ANN001
    """Bytes the SegmentLog `make()` returns holds on to (traced), measured with it open."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        log_ = make()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    log_.close()
    return grown


def test_positions_in_memory_cost_well_under_a_byte_an_entry(tmp_path: Path) -> None:
    """Sparse positions: 40,000 small entries written (and, in another log, loaded) leave
    under a byte each in memory (0.47 measured writing, 0.46 loading). A position per entry cost 8 bytes
    each, most of what an hour of small transactional writes left behind in a broker. The
    bound leaves room for what other threads of the one pytest process allocate meanwhile
    (tracemalloc counts every thread): at half a byte that was 1 KB, and it failed once."""
    n = 40_000

    def write() -> SegmentLog:
        s = SegmentLog(tmp_path / "w", fsync="never", segment_bytes=1 << 20)
        s.load()
        for lo in range(1, n + 1, 1000):
            s.append(ents(lo, lo + 999, size=60))
        return s

    def load() -> SegmentLog:
        s = SegmentLog(tmp_path / "w", fsync="never", segment_bytes=1 << 20)
        s.load_window(0)
        return s

    w = SegmentLog(tmp_path / "warm", fsync="never")  # imports and first-use caches, not counted
    w.load()
    w.append(ents(1, 10))
    w.close()
    grown = _traced_growth(write)
    assert grown / n < 1, f"{grown / n:.2f} bytes an entry after writing"
    grown = _traced_growth(load)
    assert grown / n < 1, f"{grown / n:.2f} bytes an entry after loading"


def test_reads_from_sparse_positions_match_every_range(tmp_path: Path) -> None:
    """Entries of varied sizes across segments, sampled every 200 bytes: every range read,
    with and without a byte cap, gives what was written, before and after a reopen."""
    rng = random.Random(5)
    written = [Entry(1 + i // 50, i + 1, rng.randbytes(rng.choice([0, 3, 90, 400, 1500]))) for i in range(300)]
    for attempt in range(2):
        s = SegmentLog(tmp_path, segment_bytes=5000, index_bytes=200)
        s.load()
        if attempt == 0:
            s.append(written[:150])
            s.append(written[150:])
        for _ in range(300):
            lo = rng.randint(1, 300)
            hi = rng.randint(lo + 1, 301)
            want = written[lo - 1 : hi - 1]
            assert s.read(lo, hi) == want
            assert s.read_payloads(lo, hi) == [e.data for e in want]
            cap = rng.randint(0, 6000)
            got = s.read(lo, hi, cap)
            size = [len(e.data) for e in want]
            k = next((j + 1 for j in range(len(want)) if sum(size[: j + 1]) >= cap), len(want))
            assert got == want[:k]
        s.close()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40), damage=st.integers(-1, 10**6),
       flip=st.booleans(), window=st.sampled_from([None, 0, 1, 200, 700, 1 << 20]), data=st.data())
def test_a_scan_through_small_chunks_finds_what_one_big_read_does(sizes, damage, flip, window, data) -> None:  # noqa: ANN001
    """load_window parses records in place across chunk boundaries: any chunk size keeps the
    same entries, cuts a damaged tail at the same record, and keeps the newest entries whose
    payloads (plus ENTRY_COST each) reach the window, at least the last."""
    import tempfile

    from logquake.broker import storage

    want = [Entry(1 + i // 7, i + 1, bytes([i % 256]) * n) for i, n in enumerate(sizes)]
    outcomes = []
    for chunk in (1 << 20, data.draw(st.integers(1, 64), label="chunk"), 13):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            with SegmentLog(d, segment_bytes=1500, index_bytes=data.draw(st.sampled_from([1, 100, 4096]))) as s:
                s.load()
                s.append(want)
            if damage >= 0:  # tear or flip a byte of the last segment
                seg = segments(d)[-1]
                raw = bytearray(seg.read_bytes())
                at = damage % len(raw)
                if flip:
                    raw[at] ^= 0x10
                else:
                    del raw[at:]
                seg.write_bytes(bytes(raw))
            old = storage._LOAD_CHUNK
            storage._LOAD_CHUNK = chunk
            try:
                with SegmentLog(d) as s:
                    _, runs, got = s.load_window(window)
                    every = s.read(1, s.last_index + 1) if s.last_index else []
            finally:
                storage._LOAD_CHUNK = old
        assert every == want[: len(every)]
        assert runs == [(e.index, e.term) for k, e in enumerate(every) if k == 0 or every[k - 1].term != e.term]
        if window is None:
            assert got == every
        elif every:
            assert got and got == every[-len(got) :]
            cost = [len(e.data) + ENTRY_COST for e in got]
            assert len(got) == 1 or sum(cost[1:]) < window  # no fewer would reach it
            assert sum(cost) >= window or got == every
        outcomes.append((len(every), got))
    assert outcomes[0] == outcomes[1] == outcomes[2]

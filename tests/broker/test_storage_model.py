"""A Hypothesis model of SegmentLog: logs sharing a tiny OpenFiles (so descriptors are taken
from one log and given back on its next append) against plain lists of entries.

Rules append (past the end or over a suffix, so truncating within and across segments), sync,
reopen a log (close, then load it again), tear bytes off its newest segment and reload it,
and read a log's directory afresh while its writer stays open; every read must give exactly
the model's list."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from logquake.broker.raft import Entry
from logquake.broker.storage import FSYNC_POLICIES, DirLock, OpenFiles, SegmentLog

LOGS = 3
CAPACITY = 1  # fewer open segments than logs: nearly every switch of log evicts another's fd

logs_ = st.integers(0, LOGS - 1)
payloads = st.binary(max_size=60)


class StorageModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="lq-storage-model-"))
        self.lock = DirLock(self.root)
        self.files = OpenFiles(capacity=CAPACITY)
        self.model: list[list[Entry]] = [[] for _ in range(LOGS)]
        self.logs: list[SegmentLog] = []
        self.term = 1
        self.fsync = "always"
        self.segment_bytes = 200
        self.index_bytes = 1

    @initialize(fsync=st.sampled_from(FSYNC_POLICIES), segment_bytes=st.sampled_from([40, 200, 1 << 20]),
                index_bytes=st.sampled_from([1, 50, 4096]))
    def open_all(self, fsync: str, segment_bytes: int, index_bytes: int) -> None:
        self.fsync, self.segment_bytes, self.index_bytes = fsync, segment_bytes, index_bytes
        self.logs = [self._open(k) for k in range(LOGS)]

    def _open(self, k: int) -> SegmentLog:
        s = SegmentLog(self.root / f"g{k}", fsync=self.fsync, segment_bytes=self.segment_bytes,
                       lock=False, files=self.files, index_bytes=self.index_bytes)
        hs, got = s.load()
        assert hs is None
        assert got == self.model[k]
        return s

    @rule(k=logs_, back=st.integers(0, 12), data=st.lists(payloads, min_size=1, max_size=6),
          new_term=st.booleans(), sync=st.sampled_from([None, False]))
    def append(self, k: int, back: int, data: list[bytes], new_term: bool, sync: bool | None) -> None:
        """Append at `back` entries before the end: 0 extends, more replaces a suffix."""
        self.term += new_term
        first = max(1, len(self.model[k]) + 1 - back)
        batch = [Entry(self.term, first + i, d) for i, d in enumerate(data)]
        self.logs[k].append(batch, sync=sync)
        self.model[k][first - 1 :] = batch

    @rule(k=logs_, first=st.integers(2, 40))
    def append_past_the_end_is_refused(self, k: int, first: int) -> None:
        s = self.logs[k]
        if first <= s.last_index + 1:
            return
        try:
            s.append([Entry(self.term, first, b"gap")])
        except ValueError:
            return
        raise AssertionError(f"append at {first} after {s.last_index} was accepted")

    @rule(k=logs_)
    def sync(self, k: int) -> None:
        self.logs[k].sync()

    @rule(k=logs_)
    def reopen(self, k: int) -> None:
        self.logs[k].close()
        self.logs[k] = self._open(k)

    @rule(k=logs_, cut=st.integers(1, 80))
    def tear(self, k: int, cut: int) -> None:
        """A crash tore the last `cut` bytes off the newest segment: the reload keeps a prefix
        of the log (every whole record), and reads and appends go on from the repaired end."""
        self.logs[k].close()
        segs = sorted((self.root / f"g{k}").glob("*.seg"))
        if segs:
            size = segs[-1].stat().st_size
            os.truncate(segs[-1], max(0, size - cut))
        s = SegmentLog(self.root / f"g{k}", fsync=self.fsync, segment_bytes=self.segment_bytes,
                       lock=False, files=self.files, index_bytes=self.index_bytes)
        _, got = s.load()
        m = self.model[k]
        assert got == m[: len(got)] and (len(got) < len(m) or not segs or cut == 0)
        self.model[k] = got
        self.logs[k] = s

    @rule(k=logs_, lo=st.integers(1, 40), n=st.integers(1, 40), max_bytes=st.none() | st.integers(0, 200))
    def read(self, k: int, lo: int, n: int, max_bytes: int | None) -> None:
        """A range read from the sparse positions gives the model's entries: all of them, or
        with `max_bytes` the shortest prefix (at least one) whose payloads reach it."""
        m = self.model[k]
        hi = min(lo + n, len(m) + 1)
        if lo >= hi:
            return
        want = m[lo - 1 : hi - 1]
        assert self.logs[k].read_payloads(lo, hi) == [e.data for e in want]
        if max_bytes is not None:
            size, cut = 0, 0
            while cut < len(want):
                size += len(want[cut].data)
                cut += 1
                if size >= max_bytes:
                    break
            want = want[:cut]
        assert self.logs[k].read(lo, hi, max_bytes) == want

    @rule(k=logs_)
    def read_beside_the_writer(self, k: int) -> None:
        """A second reader of the directory sees every appended entry, whichever fd is open."""
        r = SegmentLog(self.root / f"g{k}", lock=False)
        try:
            assert r.load()[1] == self.model[k]
        finally:
            r.close()

    @invariant()
    def bounded(self) -> None:
        for s, m in zip(self.logs, self.model, strict=True):
            assert s.last_index == len(m)
        assert len(self.files) <= CAPACITY
        open_segs = sum(s._fd is not None for s in self.logs)
        assert open_segs <= CAPACITY, open_segs
        segs = sum(1 for _ in self.root.glob("g*/*.seg"))
        assert segs <= sum(len(m) for m in self.model)  # no empty or orphan segments left behind

    def teardown(self) -> None:
        try:
            for s in self.logs:
                s.close()
            for k, m in enumerate(self.model):
                r = SegmentLog(self.root / f"g{k}")
                try:
                    assert r.load()[1] == m
                finally:
                    r.close()
        finally:
            self.lock.close()
            shutil.rmtree(self.root, ignore_errors=True)


StorageModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestStorageModel = StorageModel.TestCase

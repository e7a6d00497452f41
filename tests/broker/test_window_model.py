"""A Hypothesis model of a partition replica holding a window: the Raft log (payloads read
back from a SegmentLog with sparse positions), the partition's rows and sparse samples, the
node budget's partial releases and restarts (clean, or crashes) that restore the last
checkpoint and replay the log after it, against a PartitionState that holds every payload.
Sizes are tiny so every boundary (a sample, the first row, the Raft log's first entry in
memory, a segment's end) is crossed often."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker import partition as pmod
from logquake.broker.metadata import PartitionInfo
from logquake.broker.raft import RaftConfig, RaftNode
from logquake.broker.records import parse_batches
from logquake.broker.replica import PartitionReplica
from logquake.broker.storage import OpenFiles
from logquake.broker.storage_adapter import GroupStore


def _batch(n: int, ts: int, value: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=ts + i, key=None, value=b"v" * value, headers=[])
    return bytes(b.build())


def _open_under(d: Path) -> list[str]:
    """The files under `d` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{d}/"):
            found.append(target)
    return found


batches = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2000), st.integers(0, 120)), min_size=1, max_size=3)


class WindowModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lq-window-model-"))
        self.full = pmod.PartitionState()
        self.store: GroupStore | None = None

    @initialize(window=st.sampled_from([0, 100, 400, 1500]), sample_bytes=st.sampled_from([1, 120, 500]),
                index_bytes=st.sampled_from([1, 90, 4096]), segment_bytes=st.sampled_from([300, 2000, 1 << 20]),
                checkpoint_every=st.sampled_from([1, 3, 10**9]))
    def open(self, window: int, sample_bytes: int, index_bytes: int, segment_bytes: int,
             checkpoint_every: int) -> None:
        self.window, self.sample_bytes, self.checkpoint_every = window, sample_bytes, checkpoint_every
        self.index_bytes, self.segment_bytes = index_bytes, segment_bytes
        self._start()

    def _start(self) -> None:
        store = self.store = GroupStore(self.dir, "never", OpenFiles())
        store._log.segment_bytes = self.segment_bytes  # noqa: SLF001 - many segments, few entries
        store._log.index_bytes = self.index_bytes  # noqa: SLF001
        store.checkpoints.every_entries = self.checkpoint_every
        hs, runs, tail = store.load(self.window)
        state = store.load_checkpoint()  # as Node._make_raft does: the tail after it is applied
        self.raft = RaftNode(group="p1", node_id=1, voters=(1,), config=RaftConfig(log_window_bytes=self.window),
                             rng=random.Random(0), hard_state=hs, entries=tail, term_runs=runs, reader=store.read,
                             payload_reader=store.read_payloads, applied=state.applied_index if state else 0)
        self.rep = PartitionReplica(PartitionInfo(topic="t", partition=0, group_id=1, replicas=(1,)), self.raft, store,
                                    state=state)
        self.rep.state.sample_bytes = self.sample_bytes
        self.raft.campaign()
        self._run()

    def _run(self) -> None:
        raft, store = self.raft, self.store
        while raft.has_ready():
            rd = raft.ready()
            store.append(rd.entries, rd.hard_state)
            self.rep.apply_ready(rd)
            raft.advance(rd)
        # The model: every committed entry applied to a state that trims nothing.
        while self.full.applied_index < raft.applied_index:
            e = raft.entry(self.full.applied_index + 1)
            pmod.apply(self.full, index=e.index, term=e.term, data=e.data)

    @rule(spec=batches)
    def produce(self, spec: list[tuple[int, int, int]]) -> None:
        body = b"".join(_batch(n, ts, v) for n, ts, v in spec)
        assert self.rep.append(body, parse_batches(body), 0).error_code == 0
        self._run()

    @rule(keep=st.integers(0, 2000))
    def release(self, keep: int) -> None:
        """The node's budget or an idle group: down to `keep` bytes."""
        self.rep.release_memory(keep)

    @rule()
    def restart(self) -> None:
        self.store.close()
        self._start()

    @rule()
    def crash(self) -> None:
        """Stop with no close: the last periodic checkpoint (if any) and the log's tail."""
        self.store.checkpoints._wait()  # noqa: SLF001 - a write in flight ends either way; let it
        self.store.checkpoints.source = None
        log_ = self.store._log  # noqa: SLF001
        log_._closed = True  # noqa: SLF001 - abandoned, as a killed process leaves it
        if log_._fd is not None:  # noqa: SLF001 - the kernel closes a killed process's files, unsynced
            os.close(log_._fd)  # noqa: SLF001
            log_._fd = None  # noqa: SLF001
        self._start()

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        st_, full = self.rep.state, self.full
        leo = full.next_offset
        edges = [*st_._s_bases, *(st_._bases[:1]), 0, leo]  # noqa: SLF001 - the boundaries to probe
        near = st.sampled_from(edges).flatmap(lambda x: st.integers(max(0, x - 1), min(leo, x + 1)))
        offset = data.draw(near | st.integers(0, leo))
        upto = data.draw(near | st.integers(0, leo + 1))
        max_bytes, first = data.draw(st.integers(-5, 3000)), data.draw(st.booleans())
        assert st_.read(offset, upto, max_bytes, first=first) == full.read(offset, upto, max_bytes, first=first)
        exact, counted = full.readable(offset, upto), st_.readable(offset, upto)
        assert exact <= counted and (counted > 0) == (exact > 0)
        limit = data.draw(st.integers(1, 6))
        assert st_.batches_from(offset, limit) == full.batches_from(offset, limit)
        ts = data.draw(st.integers(-1, 2100))
        assert st_.offset_for_timestamp(ts) == full.offset_for_timestamp(ts)

    @invariant()
    def same_state(self) -> None:
        if self.store is None:
            return
        st_, full = self.rep.state, self.full
        assert st_.next_offset == full.next_offset
        assert st_.max_timestamp() == full.max_timestamp()
        assert st_.batches == full.batches

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        # every store this example opened (crashed ones too) let go of its files
        assert _open_under(self.dir) == []
        shutil.rmtree(self.dir, ignore_errors=True)


WindowModel.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestWindowModel = WindowModel.TestCase

"""Transaction coordinator and per-partition transaction index: transcripts, then a Hypothesis
model of a whole transactional cluster in miniature (coordinator + partitions + read_committed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logquake.broker import producer_state as ps
from logquake.broker import txn
from logquake.broker import txn_index as ti
from logquake.broker.batches import BatchInfo
from logquake.broker.kerrors import ErrorCode
from logquake.broker.txn import TopicPartition as TP
from logquake.broker.txn import TxnState

E = ErrorCode


def data(pid: int, epoch: int, seq: int, offset: int, n: int = 1) -> BatchInfo:
    return BatchInfo(first_offset=offset, record_count=n, producer_id=pid, producer_epoch=epoch,
                     base_sequence=seq, is_transactional=True)


def marker(pid: int, epoch: int, offset: int, commit: bool) -> BatchInfo:
    return BatchInfo(first_offset=offset, record_count=1, producer_id=pid, producer_epoch=epoch,
                     is_transactional=True, is_control=True, control_commit=commit)


class Coordinator:
    """A coordinator in miniature: decisions are applied at once (replication is instant)."""

    def __init__(self) -> None:
        self.state = txn.EMPTY
        self.next_pid = 1000

    def do(self, decision: txn.TxnDecision) -> txn.TxnDecision:
        if decision.record is not None:
            self.state = txn.apply(self.state, decision.record)
        return decision

    def meta(self, tid: str = "t") -> txn.TxnMetadata:
        return self.state.get(tid)

    def init(self, tid: str = "t", *, now: int = 0, expected=None, timeout: int = 60_000) -> txn.TxnDecision:
        meta = self.state.get(tid)
        new = None
        if txn.needs_new_producer_id(meta):
            new, self.next_pid = self.next_pid, self.next_pid + 1
        return self.do(txn.init_producer_id(meta, transactional_id=tid, timeout_ms=timeout, now_ms=now,
                                            new_producer_id=new, expected=expected))

    def add(self, pid: int, epoch: int, *tps: TP, tid: str = "t", now: int = 0) -> txn.TxnDecision:
        return self.do(txn.add_partitions(self.state.get(tid), producer_id=pid, producer_epoch=epoch,
                                          partitions=tps, now_ms=now))

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "t", now: int = 0, partial=False) -> txn.TxnDecision:
        return self.do(txn.end_txn(self.state.get(tid), producer_id=pid, producer_epoch=epoch, commit=commit,
                                   now_ms=now, partial=partial))

    def complete(self, tid: str = "t", now: int = 0) -> txn.TxnDecision:
        return self.do(txn.complete(self.state.get(tid), now_ms=now))


def test_transcript_commit_then_abort_then_fencing() -> None:
    c = Coordinator()
    d = c.init()
    assert (d.error, d.producer_id, d.producer_epoch) == (E.NONE, 1000, 0)
    assert c.end(1000, 0, True).error is E.INVALID_TXN_STATE  # nothing begun
    assert c.add(1000, 0, TP("a", 0), now=5).error is E.NONE
    assert c.meta().state is TxnState.ONGOING and c.meta().txn_start_ms == 5
    assert c.add(1000, 0, TP("a", 0), now=6).record is None  # already in: nothing to replicate
    c.add(1000, 0, TP("__consumer_offsets", 3), TP("b", 1), now=7)
    assert c.meta().txn_start_ms == 5
    d = c.end(1000, 0, True, now=8)
    assert d.error is E.NONE and c.meta().state is TxnState.PREPARE_COMMIT
    assert d.markers == txn.MarkerPlan(transactional_id="t", producer_id=1000, producer_epoch=0, commit=True,
                                       partitions=(TP("__consumer_offsets", 3), TP("a", 0), TP("b", 1)),
                                       txn_start_ms=5)
    assert c.add(1000, 0, TP("a", 0)).error is E.CONCURRENT_TRANSACTIONS  # markers still being written
    assert c.end(1000, 0, True).error is E.CONCURRENT_TRANSACTIONS
    assert txn.pending_markers(c.state) == [d.markers]  # what a new coordinator would resume
    c.complete()
    assert c.meta().state is TxnState.COMPLETE_COMMIT and c.meta().partitions == frozenset()
    assert c.end(1000, 0, True).error is E.NONE  # a retried EndTxn
    assert c.end(1000, 0, False).error is E.INVALID_TXN_STATE
    c.add(1000, 0, TP("a", 0))
    d = c.init()  # a new instance with the same transactional id fences the ongoing one
    assert d.error is E.CONCURRENT_TRANSACTIONS
    assert c.meta().state is TxnState.PREPARE_ABORT and d.markers.producer_epoch == 1 and not d.markers.commit
    assert c.end(1000, 0, True).error is E.PRODUCER_FENCED  # the zombie
    c.complete()
    d = c.init()
    assert (d.error, d.producer_id, d.producer_epoch) == (E.NONE, 1000, 2)
    assert c.add(1000, 1, TP("a", 0)).error is E.PRODUCER_FENCED
    assert c.add(999, 2, TP("a", 0)).error is E.INVALID_PRODUCER_ID_MAPPING
    assert c.add(1000, 2, TP("a", 0), tid="other").error is E.INVALID_PRODUCER_ID_MAPPING


def test_timeout_aborts_with_a_fencing_bump_and_kip360_recovery() -> None:
    c = Coordinator()
    c.init(timeout=1000)
    c.add(1000, 0, TP("a", 0), now=100)
    assert txn.expire(c.state, now_ms=1100) == []
    (d,) = txn.expire(c.state, now_ms=1101)
    c.do(d)
    assert c.meta().state is TxnState.PREPARE_ABORT and c.meta().producer_epoch == 1
    assert d.markers.partitions == (TP("a", 0),) and not d.markers.commit
    assert c.end(1000, 0, True).error is E.PRODUCER_FENCED
    c.complete()
    assert c.init(expected=(1000, 5)).error is E.PRODUCER_FENCED  # not an epoch it ever had
    d = c.init(expected=(1000, 0))  # KIP-360: the timed-out producer recovers with a bump
    assert (d.error, d.producer_epoch) == (E.NONE, 2)


def test_exhausted_epoch_gets_a_new_producer_id() -> None:
    c = Coordinator()
    c.init()
    c.do(txn.TxnDecision(record=txn.TxnMetadata(transactional_id="t", producer_id=1000,
                                                producer_epoch=txn.MAX_EPOCH - 1, timeout_ms=60_000)))
    d = c.init()
    assert (d.producer_id, d.producer_epoch) == (1001, 0)


def test_invalid_timeout_and_illegal_transitions() -> None:
    c = Coordinator()
    assert c.init(timeout=0).error is E.INVALID_TRANSACTION_TIMEOUT
    assert c.init(timeout=txn.MAX_TIMEOUT_MS + 1).error is E.INVALID_TRANSACTION_TIMEOUT
    c.init()
    before = c.state
    with pytest.raises(txn.IllegalTxnTransition, match="Empty -> CompleteCommit"):
        c.complete()
    assert c.state == before
    with pytest.raises(ValueError, match="new_producer_id"):
        txn.init_producer_id(None, transactional_id="x", timeout_ms=1000, now_ms=0)


def test_partial_markers_unsafe_mode_drops_all_but_one_partition() -> None:
    c = Coordinator()
    c.init()
    c.add(1000, 0, TP("a", 0), TP("a", 1), TP("__consumer_offsets", 0))
    d = c.end(1000, 0, True, partial=True)
    assert d.markers.partitions == (TP("__consumer_offsets", 0),)


def test_index_transcript_lso_and_aborted_list() -> None:
    idx = ti.EMPTY
    idx = ti.apply_batch(idx, data(1, 0, 0, offset=0, n=2))  # pid 1 opens at 0
    idx = ti.apply_batch(idx, BatchInfo(first_offset=2, record_count=1))  # plain record
    idx = ti.apply_batch(idx, data(2, 0, 0, offset=3))  # pid 2 opens at 3
    idx = ti.apply_batch(idx, data(1, 0, 2, offset=4))
    assert ti.last_stable_offset(idx, 5) == 0
    assert ti.fetch_upper_bound(idx, 5, read_committed=True) == 0
    assert ti.fetch_upper_bound(idx, 5, read_committed=False) == 5
    assert ti.fetch_upper_bound(idx, 5, read_committed=True, leak=True) == 5  # unsafe mode
    idx = ti.apply_batch(idx, marker(1, 0, 5, commit=False))
    assert ti.last_stable_offset(idx, 6) == 3
    idx = ti.apply_batch(idx, marker(2, 0, 6, commit=True))
    assert ti.last_stable_offset(idx, 7) == 7
    assert idx.aborted == (ti.AbortedTxn(producer_id=1, first_offset=0, last_offset=5),)
    assert ti.aborted_between(idx, 0, 7) == idx.aborted
    assert ti.aborted_between(idx, 6, 7) == ()
    assert ti.aborted_between(idx, 5, 6) == idx.aborted
    idx2 = ti.apply_batch(idx, marker(9, 0, 7, commit=False))  # a marker with no data here
    assert idx2 == idx


def _aborted_oracle(batches: list[BatchInfo]) -> list[ti.AbortedTxn]:
    """The aborted index replayed plainly: each ABORT closes its producer's open transaction."""
    opened: dict[int, int] = {}
    out = []
    for b in batches:
        if not b.is_control:
            opened.setdefault(b.producer_id, b.first_offset)
        elif b.producer_id in opened:
            first = opened.pop(b.producer_id)
            if not b.control_commit:
                out.append(ti.AbortedTxn(producer_id=b.producer_id, first_offset=first, last_offset=b.first_offset))
    return out


# A step: (producer 1-3, True for a data batch, commit if a marker, which earlier index to extend).
steps = st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.booleans(), st.integers(0, 5)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps, st.data())
def test_every_index_keeps_its_own_aborted_list_when_later_ones_grow(script, picks) -> None:
    """Indexes are values: extending the newest or a branch off an older one (the shared list
    is appended in place only by its newest index) never changes what another one lists."""
    kept = [(ti.EMPTY, [])]  # (index, the batches it was built from)
    for pid, is_data, commit, back in script:
        idx, batches = kept[max(0, len(kept) - 1 - back)]
        offset = len(batches)
        b = data(pid, 0, offset, offset) if is_data else marker(pid, 0, offset, commit)
        kept.append((ti.apply_batch(idx, b), [*batches, b]))
    for idx, batches in kept:
        want = _aborted_oracle(batches)
        assert list(idx.aborted) == want
        start, end = picks.draw(st.integers(0, len(batches))), picks.draw(st.integers(0, len(batches) + 1))
        assert list(ti.aborted_between(idx, start, end)) == [a for a in want if a.last_offset >= start
                                                            and a.first_offset < end]


def test_an_abort_extends_the_aborted_index_without_copying_it() -> None:
    """20,000 aborts, every index kept (as a replica's successive states are made): each holds
    a few hundred bytes of its own, not a copy of all the aborts before it (a copy per abort
    makes a partition's apply time quadratic in a long run's aborts)."""
    import tracemalloc

    idx, n = ti.EMPTY, 20_000
    kept = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(n):
            idx = ti.apply_batch(ti.apply_batch(idx, data(7, 0, k, 2 * k)), marker(7, 0, 2 * k + 1, commit=False))
            kept.append(idx)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown / n < 1000, f"{grown / n:.0f} bytes an abort"
    assert ti.aborted_between(idx, 2 * n - 1, 2 * n) == (ti.AbortedTxn(producer_id=7, first_offset=2 * n - 2,
                                                                       last_offset=2 * n - 1),)
    assert len(kept[n // 2].aborted) == n // 2 + 1


class TransactionalCluster(RuleBasedStateMachine):
    """One transactional id, its current producer and its zombies, two partitions, a reader.

    Each data record is tagged with the transaction that wrote it; the coordinator's
    decisions tell which transactions committed. A read_committed reader (records below the
    LSO, minus the aborted list, minus markers) must only ever see committed transactions.
    """

    PARTS = (TP("a", 0), TP("b", 0))

    def __init__(self) -> None:
        super().__init__()
        self.c = Coordinator()
        self.now = 0
        self.logs: dict[TP, list[tuple[BatchInfo, object]]] = {tp: [] for tp in self.PARTS}
        self.producers = {tp: ps.EMPTY for tp in self.PARTS}
        self.index = {tp: ti.EMPTY for tp in self.PARTS}
        self.handles: list[dict] = []  # each: pid, epoch, seq per partition, added, tag
        self.outcome: dict[object, str] = {}  # tag -> "commit" | "abort"
        self.tags = 0
        self.pending: txn.MarkerPlan | None = None
        self.epochs_seen: list[int] = []

    def _append(self, tp: TP, info: BatchInfo, tag: object) -> None:
        self.logs[tp].append((info, tag))
        self.producers[tp] = ps.apply_batch(self.producers[tp], info)
        self.index[tp] = ti.apply_batch(self.index[tp], info)

    def _end(self, tp: TP) -> int:
        return self.logs[tp][-1][0].last_offset + 1 if self.logs[tp] else 0

    def _decided(self, d: txn.TxnDecision) -> None:
        if d.markers is not None:
            meta = self.c.meta()
            for tag, pid_epoch in list(self._open_tags()):
                if pid_epoch[0] == meta.producer_id:
                    self.outcome.setdefault(tag, "commit" if d.markers.commit else "abort")
            self.pending = d.markers

    def _open_tags(self):
        for h in self.handles:
            if h["tag"] is not None and h["tag"] not in self.outcome:
                yield h["tag"], (h["pid"], h["epoch"])

    @precondition(lambda self: self.pending is None)
    @rule()
    def init(self) -> None:
        d = self.c.init(now=self.now)
        self._decided(d)
        if d.error is E.NONE:
            self.handles.append({"pid": d.producer_id, "epoch": d.producer_epoch, "seq": {}, "added": set(),
                                 "tag": None})

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), tp=st.sampled_from(PARTS))
    def add_partition(self, data, tp: TP) -> None:
        h = data.draw(st.sampled_from(self.handles))
        was_ongoing = self.c.meta().state is TxnState.ONGOING
        d = self.c.add(h["pid"], h["epoch"], tp, now=self.now)
        if d.error is E.NONE:
            if not was_ongoing:
                self.tags += 1
                h["tag"], h["added"] = self.tags, set()
            h["added"].add(tp)

    @precondition(lambda self: any(h["added"] for h in self.handles))
    @rule(data=st.data(), n=st.integers(1, 3))
    def produce(self, data, n: int) -> None:
        h = data.draw(st.sampled_from([h for h in self.handles if h["added"]]))
        tp = data.draw(st.sampled_from(sorted(h["added"])))
        seq = h["seq"].get((tp, h["epoch"]), 0)
        info = BatchInfo(first_offset=self._end(tp), record_count=n, producer_id=h["pid"],
                         producer_epoch=h["epoch"], base_sequence=seq, is_transactional=True)
        verdict = ps.check_batch(self.producers[tp], info)
        if verdict.outcome is ps.Outcome.APPEND:
            self._append(tp, info, h["tag"])
            h["seq"][(tp, h["epoch"])] = seq + n

    @precondition(lambda self: self.handles and self.pending is None)
    @rule(data=st.data(), commit=st.booleans())
    def end(self, data, commit: bool) -> None:
        h = data.draw(st.sampled_from(self.handles))
        d = self.c.end(h["pid"], h["epoch"], commit, now=self.now)
        self._decided(d)
        if d.error is E.NONE:
            # A client adds partitions again for its next transaction before producing to them.
            # (A produce request delayed past the markers would open a "hanging" transaction:
            # transactions v1 cannot tell it from a new one; Kafka fixes that only in KIP-890.)
            h["added"] = set()

    @precondition(lambda self: self.pending is not None)
    @rule()
    def write_markers_and_complete(self) -> None:
        plan, self.pending = self.pending, None
        for tp in plan.partitions:
            self._append(tp, marker(plan.producer_id, plan.producer_epoch, self._end(tp), plan.commit), None)
        self.c.complete(now=self.now)

    @precondition(lambda self: self.pending is None)
    @rule(ms=st.integers(0, 70_000))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        for d in txn.expire(self.c.state, now_ms=self.now):
            self.c.do(d)
            self._decided(d)

    def _read_committed(self, tp: TP) -> list[object]:
        lso = ti.last_stable_offset(self.index[tp], self._end(tp))
        aborted = ti.aborted_between(self.index[tp], 0, lso)
        seen = []
        for info, tag in self.logs[tp]:
            if info.is_control or info.first_offset >= lso:
                continue
            if any(a.producer_id == info.producer_id and a.first_offset <= info.first_offset <= a.last_offset
                   for a in aborted):
                continue
            seen.append(tag)
        return seen

    @invariant()
    def read_committed_sees_only_committed_transactions(self) -> None:
        for tp in self.PARTS:
            for tag in self._read_committed(tp):
                assert self.outcome.get(tag) == "commit", f"read_committed saw transaction {tag}"

    @invariant()
    def lso_never_passes_an_open_transaction(self) -> None:
        for tp in self.PARTS:
            lso = ti.last_stable_offset(self.index[tp], self._end(tp))
            assert lso <= self._end(tp)
            assert all(lso <= first for first in self.index[tp].open.values())

    @invariant()
    def epochs_only_grow(self) -> None:
        meta = self.c.meta()
        if meta is not None:
            self.epochs_seen.append(meta.producer_epoch)
            assert self.epochs_seen == sorted(self.epochs_seen)

    @invariant()
    def ongoing_means_partitions(self) -> None:
        meta = self.c.meta()
        if meta is not None:
            assert (meta.state is TxnState.ONGOING) <= bool(meta.partitions)
            assert (meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)) <= (
                not meta.partitions)

    def teardown(self) -> None:
        # Once every marker is written and no transaction is open, all committed data is visible.
        if self.pending is None and self.c.meta() is not None and self.c.meta().state is not TxnState.ONGOING:
            for tp in self.PARTS:
                committed = [t for i, t in self.logs[tp] if not i.is_control and self.outcome.get(t) == "commit"]
                if not self.index[tp].open:
                    assert self._read_committed(tp) == committed


TestTransactionalCluster = TransactionalCluster.TestCase
TestTransactionalCluster.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)

"""The coordinator's marker task ends only the transaction it was made for.

A marker task can run late: one `_resume` spawns on a coordinator tick, or one left from an
earlier shard. By then its own transaction may have ended and the client may have begun and
prepared the next one under the same producer epoch. Were the task to write its old markers
and then complete that next transaction, whose own markers were never written, the next
transaction's records would stay open until the producer's next COMMIT marker closed them as
committed: a deliberately aborted record visible to read_committed readers (G1a, as an e2e
run of subscribe + txn under partitions, at-least-once, showed).

These drive `TxnService._write_markers` itself; only the network (which broker leads what, the
WriteTxnMarkers calls) and the Raft append are stood in for.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from logquake.broker import txn
from logquake.broker.handlers_txn import TxnService
from logquake.broker.kerrors import ErrorCode
from logquake.broker.txn import TopicPartition as TP
from logquake.broker.txn import TxnState


class _Shard:
    """A coordinator shard as `_write_markers` uses it, its state given by the test."""

    def __init__(self, state: txn.TxnCoordinatorState) -> None:
        self.state = state
        self.current = True
        self.term = 1
        self.lock = asyncio.Lock()
        self.marking: set[str] = set()

    def catch_up(self) -> None:
        pass


def _service(shard: _Shard) -> tuple[TxnService, list, list]:
    svc = TxnService(SimpleNamespace(cfg=SimpleNamespace(unsafe={})))
    sent: list[tuple[bool, tuple[TP, ...]]] = []
    appended: list[txn.TxnMetadata] = []

    async def send_markers(leader, plan, tps, term):
        sent.append((plan.commit, tuple(tps)))
        await asyncio.sleep(0)
        return set(tps)

    async def append(sh, meta):
        appended.append(meta)
        sh.state = txn.apply(sh.state, meta)
        return ErrorCode.NONE

    svc._by_leader = lambda tps: {1: sorted(tps)}
    svc._send_markers = send_markers
    svc._append = append
    return svc, sent, appended


def _prepared(tps: frozenset[TP], start: int, *, commit: bool = False) -> txn.TxnMetadata:
    ongoing = txn.TxnMetadata(transactional_id="t", producer_id=7, producer_epoch=3, timeout_ms=10_000,
                              state=TxnState.ONGOING, partitions=tps, txn_start_ms=start)
    return txn.end_txn(ongoing, producer_id=7, producer_epoch=3, commit=commit, now_ms=start + 1).record


def test_a_late_marker_task_neither_marks_nor_completes_the_next_transaction() -> None:
    first = _prepared(frozenset({TP("lq-4", 0)}), start=100)
    plan = txn.marker_plan(first)
    # By the time the late task runs, `first` is complete and the next transaction of the
    # same producer epoch is prepared: an abort of lq-8 whose markers are not written yet.
    second = _prepared(frozenset({TP("lq-8", 0)}), start=200)
    shard = _Shard(txn.apply(txn.EMPTY, second))
    svc, sent, appended = _service(shard)
    asyncio.run(svc._write_markers(shard, plan))
    assert appended == [], "the late task completed a transaction whose markers it never wrote"
    assert sent == []
    assert shard.state.get("t").state is TxnState.PREPARE_ABORT


def test_a_marker_task_completes_its_own_transaction() -> None:
    first = _prepared(frozenset({TP("lq-4", 0), TP("lq-5", 0)}), start=100, commit=True)
    shard = _Shard(txn.apply(txn.EMPTY, first))
    svc, sent, appended = _service(shard)
    asyncio.run(svc._write_markers(shard, txn.marker_plan(first)))
    assert sent == [(True, (TP("lq-4", 0), TP("lq-5", 0)))]
    assert [m.state for m in appended] == [TxnState.COMPLETE_COMMIT]


def test_awaits_tells_transactions_of_one_producer_epoch_apart() -> None:
    first = _prepared(frozenset({TP("a", 0)}), start=100)
    plan = txn.marker_plan(first)
    assert txn.awaits(first, plan)
    assert not txn.awaits(_prepared(frozenset({TP("a", 0)}), start=200), plan)  # same partition, later txn
    assert not txn.awaits(txn.complete(first, now_ms=150).record, plan)
    assert not txn.awaits(_prepared(frozenset({TP("a", 0)}), start=100, commit=True), plan)
    assert not txn.awaits(None, plan)

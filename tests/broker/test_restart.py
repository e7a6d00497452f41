"""A restarted broker replays its logs without holding its event loop, and a transaction
coordinator folds its log at what the live state costs.

After a 60-min soak a node's restart took 20-36 s during which it answered nothing: its loop
replayed every group's committed log (and folded `__transaction_state`, 80k records a
partition) without once letting sockets or timers in. These tests count, not time: loop turns
that other tasks saw mid-replay, and the fold's result against the per-batch one.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from logquake.broker import checkpoint, txn, txn_log
from logquake.broker.node import Node
from logquake.broker.nodeconfig import NodeConfig
from logquake.broker.raft import Entry, HardState, RaftConfig, RaftNode
from logquake.broker.records import parse_batches
from logquake.broker.txn import TopicPartition as TP
from logquake.broker.txn import TxnState
from tests.broker.conftest import leading_partition, one_node_config, until

ENTRIES = 6000  # several replay Readies at the default max_committed_entries


def _meta(i: int, tid: str, state: TxnState) -> txn.TxnMetadata:
    return txn.TxnMetadata(transactional_id=tid, producer_id=7, producer_epoch=i % 30000, timeout_ms=60000,
                           state=state, partitions=frozenset({TP("t", i % 3)}), txn_start_ms=i, last_update_ms=i)


def test_a_replay_hands_out_its_committed_entries_a_bounded_chunk_at_a_time() -> None:
    log = [Entry(1, i, b"x") for i in range(1, 5001)]
    r = RaftNode(group="g", node_id=1, voters=(1, 2, 3), config=RaftConfig(max_committed_entries=700),
                 rng=random.Random(0), hard_state=HardState(1, None, 5000), entries=log)
    got: list[int] = []
    while r.has_ready():
        rd = r.ready()
        assert len(rd.committed) <= 700
        got += [e.index for e in rd.committed]
        r.advance(rd)
    assert got == list(range(1, 5001))


async def _write_txn_log(cfg: NodeConfig) -> None:
    """A one-node broker whose one partition holds ENTRIES transaction-state records, one
    Raft entry each, appended through the leader's own path (`PartitionReplica.append`)."""
    async with leading_partition(cfg, new_topic="txns") as (node, rep):
        for lo in range(0, ENTRIES, 500):
            futs = []
            for i in range(lo, lo + 500):
                batch = txn_log.encode(_meta(i, f"tx-{i % 4}", TxnState.ONGOING))
                futs.append(rep.append(batch, parse_batches(batch), -1))
            node.kick()
            assert all(o.error_code == 0 for o in await asyncio.gather(*futs))


async def _restart_and_watch(cfg: NodeConfig) -> tuple[int, int]:
    """Restart the node; (times another task ran while its partition was part-replayed, the
    commit index that replay reached)."""
    node = Node(cfg)
    run = asyncio.create_task(node.run())
    await until(lambda: node.partitions, "the partition's group")
    rep = next(iter(node.partitions.values()))
    target = rep.raft.commit_index
    assert target >= ENTRIES
    mid = 0
    while rep.raft.applied_index < target:
        mid += 0 < rep.raft.applied_index
        await asyncio.sleep(0)
    node.stop()
    await run
    return mid, target


def test_a_restart_replays_a_long_log_without_holding_the_loop(tmp_path: Path) -> None:
    cfg = one_node_config(tmp_path)
    asyncio.run(_write_txn_log(cfg))
    # Without its checkpoint (a crash before the first one): the whole log is replayed.
    for ck in (cfg.data_dir / "groups").glob(f"*/{checkpoint.FILE}"):
        ck.unlink()
    mid, _ = asyncio.run(_restart_and_watch(cfg))
    # Before: the whole replay ran in back-to-back loop turns that never yielded (0 here).
    assert mid >= 3


_RECORDS = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(list(TxnState)), st.integers(0, 10**6)),
                    max_size=60)


@settings(max_examples=60, deadline=None)
@given(_RECORDS, _RECORDS, st.sets(st.integers(0, 59)))
def test_folding_many_batches_is_folding_each_in_order(first, records, odd) -> None:  # noqa: ANN001
    start = txn.EMPTY
    for k, s, t in first:
        start = txn.apply(start, _meta(t, f"id-{k}", s))
    batches = []
    for i, (k, s, t) in enumerate(records):
        batches.append(txn_log.encode(_meta(t, f"id-{k}", s)) if i not in odd else _foreign(i))
    want = start
    for b in batches:
        want = txn_log.apply_batch(want, b)
    got = txn_log.apply_batches(start, batches)
    assert list(got.txns.items()) == list(want.txns.items())


def _foreign(i: int) -> bytes:
    """A batch someone else produced to the topic: not JSON, or another key type."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    key, value = [(b"not json", b"{}"), (b'{"t": "other"}', b"{}"), (None, b"x")][i % 3]
    b.append(0, timestamp=0, key=key, value=value, headers=[])
    return bytes(b.build())

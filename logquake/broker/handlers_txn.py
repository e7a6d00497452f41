"""Transaction Kafka APIs on a `Node`: InitProducerId (transactional), AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, and WriteTxnMarkers between brokers.

The coordinator of a transactional id is the ready Raft leader of `__transaction_state`
partition crc32(id) % 3. Per such partition this node leads, a `_TxnShard` folds the
committed metadata records (`txn_log`) and serialises decisions with a lock: decide with the
pure `txn` functions, append the new record through Raft, wait for its commit, answer.

Markers (KIP-98): once a PrepareCommit/PrepareAbort record is committed the client is
answered, and a background task sends WriteTxnMarkers to the leader of every partition of
the transaction (over the Kafka port, like Kafka's inter-broker channel), retrying until
each has appended its control batch; then the CompleteCommit/CompleteAbort record is written.
A new coordinator resumes the markers of every prepared transaction it finds in the log. A
ticker aborts transactions that outlived their timeout.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import WriteTxnMarkersRequest

from logquake.broker import txn, txn_log
from logquake.broker.apis import APIS, ApiKey, response
from logquake.broker.batches import control_batch
from logquake.broker.coordination import (
    OFFSETS_TOPIC,
    TXN_STATE_TOPIC,
    FoldedShard,
    append_committed,
    coordinator_partition,
    coordinator_replica,
    ensure_topic,
)
from logquake.broker.kerrors import ErrorCode

if TYPE_CHECKING:
    from logquake.broker.codec import Request
    from logquake.broker.node import Node

__all__ = ["TxnService"]

log = logging.getLogger("logquake.broker.txn")

E = ErrorCode
TICK_S = 0.5


def _wall_ms() -> int:
    return int(time.time() * 1000)  # replicated timestamps: a new coordinator compares with its own clock


def _fenced_for(version: int, newest_without: int, error: ErrorCode) -> int:
    """KIP-588: clients older than the version that knows PRODUCER_FENCED get INVALID_PRODUCER_EPOCH."""
    if error is E.PRODUCER_FENCED and version <= newest_without:
        return int(E.INVALID_PRODUCER_EPOCH)
    return int(error)


class _TxnShard(FoldedShard[txn.TxnCoordinatorState]):
    """This node as leader of one `__transaction_state` partition in one term."""

    def __init__(self, rep: Any) -> None:
        super().__init__(rep, txn.EMPTY, txn_log.apply_batch, txn_log.apply_batches)
        self.lock = asyncio.Lock()
        self.marking: set[str] = set()  # transactional ids whose markers a task is writing


class TxnService:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.partial = node.cfg.unsafe.get("txn_markers") == "partial"
        self.shards: dict[int, _TxnShard] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- coordinator shards ------------------------------------------------------------------

    def _shard(self, transactional_id: str) -> tuple[_TxnShard | None, ErrorCode]:
        index, rep, err = coordinator_replica(self.node, TXN_STATE_TOPIC, transactional_id)
        if rep is None:
            return None, err
        shard = self._lead(index, rep)
        shard.catch_up()
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self.tick_loop())
        return shard, E.NONE

    def _lead(self, index: int, rep: Any) -> _TxnShard:
        """The shard of partition `index` led through `rep`; a new one resumes its prepared markers."""
        shard = self.shards.get(index)
        if shard is None or not shard.current or shard.rep is not rep:
            shard = self.shards[index] = _TxnShard(rep)
            shard.catch_up()
            self._resume(shard)
        return shard

    def _adopt(self) -> None:
        """Take up every `__transaction_state` partition this node leads, without waiting for a client.

        Kafka loads a coordinator partition on election: a new coordinator finishes prepared
        transactions and times out open ones even when no client of theirs ever comes back
        (else their partitions' LSO stays put and read_committed readers see nothing past it).
        """
        info = self.node.meta.state.topics.get(TXN_STATE_TOPIC)
        if info is None:
            return
        for index, p in enumerate(info.partitions):
            rep = self.node.partitions.get(p.group_id)
            if rep is not None and rep.is_ready_leader:
                self._lead(index, rep)

    def _resume(self, shard: _TxnShard) -> None:
        for plan in txn.pending_markers(shard.state, partial=self.partial):
            self._spawn(self._write_markers(shard, plan))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def tick_loop(self) -> None:
        """Adopt led partitions, time out transactions; the node runs it from its start, since
        coordinators act without client traffic too (else the first request starts it)."""
        self._ticker = asyncio.current_task()
        while True:
            await asyncio.sleep(TICK_S)
            self._adopt()
            for index, shard in list(self.shards.items()):
                if not shard.current:
                    del self.shards[index]
                    continue
                try:
                    await self._expire(shard)
                except Exception:
                    log.exception("transaction timeout check failed")

    async def _expire(self, shard: _TxnShard) -> None:
        async with shard.lock:
            shard.catch_up()
            for decision in txn.expire(shard.state, now_ms=_wall_ms()):
                log.info("transaction %r timed out: aborting", decision.record.transactional_id)
                await self._commit(shard, decision)
            self._resume(shard)

    async def _append(self, shard: _TxnShard, meta: txn.TxnMetadata) -> ErrorCode:
        batch = txn_log.encode(meta, timestamp_ms=_wall_ms())
        out = await append_committed(self.node, shard.rep, batch)
        if out is None or out.error_code:
            return E.NOT_COORDINATOR
        shard.catch_up()
        return E.NONE

    async def _commit(self, shard: _TxnShard, decision: txn.TxnDecision) -> ErrorCode:
        """Replicate a decision's record, start its markers; the error to answer."""
        if decision.record is not None:
            err = await self._append(shard, decision.record)
            if err:
                return err
        if decision.markers is not None:
            self._spawn(self._write_markers(shard, decision.markers))
        return decision.error

    # ---- markers -------------------------------------------------------------------------------

    async def _write_markers(self, shard: _TxnShard, plan: txn.MarkerPlan) -> None:
        tid = plan.transactional_id
        if tid in shard.marking:
            return
        shard.marking.add(tid)
        try:
            remaining = set(plan.partitions)
            delay = 0.05
            while remaining:
                if not shard.current:
                    return  # the next coordinator resumes them
                shard.catch_up()
                if not txn.awaits(shard.state.get(tid), plan):
                    return  # ended already (another task's markers): this one must not mark the next
                for leader, tps in self._by_leader(remaining).items():
                    remaining -= await self._send_markers(leader, plan, tps, shard.term)
                if remaining:
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 1.0)
            async with shard.lock:
                shard.catch_up()
                meta = shard.state.get(tid)
                if txn.awaits(meta, plan):
                    await self._append(shard, txn.complete(meta, now_ms=_wall_ms()).record)
        finally:
            shard.marking.discard(tid)

    def _by_leader(self, tps: set[txn.TopicPartition]) -> dict[int, list[txn.TopicPartition]]:
        out: dict[int, list[txn.TopicPartition]] = defaultdict(list)
        topics = self.node.meta.state.topics
        for tp in sorted(tps):
            info = topics.get(tp.topic)
            if info is None or tp.partition >= len(info.partitions):
                continue
            leader, _ = self.node.leader_of(info.partitions[tp.partition].group_id)
            if leader >= 0:
                out[leader].append(tp)
        return out

    async def _send_markers(self, leader: int, plan: txn.MarkerPlan, tps: list[txn.TopicPartition],
                            coordinator_epoch: int) -> set[txn.TopicPartition]:
        """WriteTxnMarkers to one broker; the partitions that now have their marker."""
        cls = WriteTxnMarkersRequest[1]
        M = cls.WritableTxnMarker
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        req = cls(markers=[M(producer_id=plan.producer_id, producer_epoch=plan.producer_epoch,
                             transaction_result=plan.commit, coordinator_epoch=coordinator_epoch,
                             topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                                     for t, ps in by_topic.items()])])
        addr = next((n for n in self.node.cfg.nodes if n.node_id == leader), None)
        if addr is None:
            return set()
        try:
            resp = await _call(addr.host, addr.kafka_port, req)
        except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError) as e:
            log.info("WriteTxnMarkers to node %d failed: %s", leader, e)
            return set()
        done = set()
        for marker in resp.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if p.error_code == E.NONE:
                        done.add(txn.TopicPartition(t.name, p.partition_index))
                    else:
                        log.info("marker for %s-%d on node %d: error %d", t.name, p.partition_index, leader,
                                 p.error_code)
        return done

    async def write_txn_markers(self, req: Request) -> Any:
        """(Partition leader side) append each requested COMMIT/ABORT control batch, wait for commit."""
        cls = APIS[ApiKey.WRITE_TXN_MARKERS].response[req.api_version]
        R = cls.WritableTxnMarkerResult
        T = R.WritableTxnMarkerTopicResult
        results = []
        for m in req.body.markers:
            topics = []
            for t in m.topics:
                codes = await asyncio.gather(*(self._write_marker(t.name, p, m) for p in t.partition_indexes))
                topics.append(T(name=t.name, partitions=[
                    T.WritableTxnMarkerPartitionResult(partition_index=p, error_code=c)
                    for p, c in zip(t.partition_indexes, codes, strict=True)]))
            results.append(R(producer_id=m.producer_id, topics=topics))
        return cls(markers=results)

    async def _write_marker(self, topic: str, partition: int, m: Any) -> int:
        info = self.node.meta.state.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return E.UNKNOWN_TOPIC_OR_PARTITION
        rep = self.node.partitions.get(info.partitions[partition].group_id)
        if rep is None or not rep.is_ready_leader:
            return E.NOT_LEADER_OR_FOLLOWER
        entry = rep.spec_producers.get(m.producer_id)
        if entry is not None and m.producer_epoch < entry.epoch:
            return int(E.INVALID_PRODUCER_EPOCH)  # a marker from a coordinator that was fenced since
        batch = control_batch(commit=m.transaction_result, producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                              coordinator_epoch=m.coordinator_epoch, timestamp_ms=_wall_ms())
        out = await append_committed(self.node, rep, batch)
        return E.REQUEST_TIMED_OUT if out is None else out.error_code

    # ---- client APIs ----------------------------------------------------------------------------

    def init_producer_id(self, req: Request) -> Any:
        if req.body.transactional_id is None:
            return self.node.api.init_producer_id(req)  # idempotent producers: the front-end's
        return self._init_transactional(req)

    async def _init_transactional(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        shard, err = self._shard(b.transactional_id)
        pid, epoch = -1, -1
        if not err:
            async with shard.lock:
                shard.catch_up()
                meta = shard.state.get(b.transactional_id)
                new_pid = await self.node.new_producer_id() if txn.needs_new_producer_id(meta) else None
                if txn.needs_new_producer_id(meta) and new_pid is None:
                    err = E.COORDINATOR_NOT_AVAILABLE
                else:
                    expected = (b.producer_id, b.producer_epoch) if v >= 3 and b.producer_id >= 0 else None
                    d = txn.init_producer_id(meta, transactional_id=b.transactional_id,
                                             timeout_ms=b.transaction_timeout_ms, now_ms=_wall_ms(),
                                             new_producer_id=new_pid, expected=expected)
                    err = await self._commit(shard, d)
                    pid, epoch = (d.producer_id, d.producer_epoch) if not err else (-1, -1)
        if err:
            log.info("InitProducerId for %r from %s: %s", b.transactional_id, req.client_id, err.name)
        return response(ApiKey.INIT_PRODUCER_ID, req.api_version, error_code=_fenced_for(v, 3, err), producer_id=pid,
                         producer_epoch=epoch)

    async def _add(self, tid: str, pid: int, epoch: int, tps: list[txn.TopicPartition]) -> ErrorCode:
        shard, err = self._shard(tid)
        if err:
            return err
        async with shard.lock:
            shard.catch_up()
            d = txn.add_partitions(shard.state.get(tid), producer_id=pid, producer_epoch=epoch, partitions=tps,
                                   now_ms=_wall_ms())
            return await self._commit(shard, d)

    async def add_partitions_to_txn(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        wanted = [txn.TopicPartition(t.name, p) for t in b.v3_and_below_topics for p in t.partitions]
        topics = self.node.meta.state.topics
        unknown = {tp for tp in wanted if tp.topic not in topics or tp.partition >= len(topics[tp.topic].partitions)}
        if unknown:
            codes = {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED for tp in wanted}
        else:
            err = await self._add(b.v3_and_below_transactional_id, b.v3_and_below_producer_id,
                                  b.v3_and_below_producer_epoch, wanted)
            if err:
                log.info("AddPartitionsToTxn for %r from %s: %s", b.v3_and_below_transactional_id, req.client_id,
                         err.name)
            codes = dict.fromkeys(wanted, _fenced_for(v, 1, err))
        cls = APIS[ApiKey.ADD_PARTITIONS_TO_TXN].response[v]
        T = cls.AddPartitionsToTxnTopicResult
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for tp, code in codes.items():
            by_topic[tp.topic].append(T.AddPartitionsToTxnPartitionResult(partition_index=tp.partition,
                                                                           partition_error_code=code))
        return response(ApiKey.ADD_PARTITIONS_TO_TXN, req.api_version, error_code=E.NONE, results_by_transaction=[],
                         results_by_topic_v3_and_below=[T(name=t, results_by_partition=rs)
                                                        for t, rs in by_topic.items()])

    async def add_offsets_to_txn(self, req: Request) -> Any:
        b = req.body
        tp = txn.TopicPartition(OFFSETS_TOPIC, coordinator_partition(b.group_id))
        if OFFSETS_TOPIC not in self.node.meta.state.topics:
            ensure_topic(self.node, OFFSETS_TOPIC)
            err = E.COORDINATOR_NOT_AVAILABLE
        else:
            err = await self._add(b.transactional_id, b.producer_id, b.producer_epoch, [tp])
        return response(ApiKey.ADD_OFFSETS_TO_TXN, req.api_version, error_code=_fenced_for(req.api_version, 1, err))

    async def end_txn(self, req: Request) -> Any:
        b = req.body
        shard, err = self._shard(b.transactional_id)
        if not err:
            async with shard.lock:
                shard.catch_up()
                d = txn.end_txn(shard.state.get(b.transactional_id), producer_id=b.producer_id,
                                producer_epoch=b.producer_epoch, commit=b.committed, now_ms=_wall_ms(),
                                partial=self.partial)
                err = await self._commit(shard, d)
        if err:
            log.info("EndTxn(%s) for %r from %s: %s", "commit" if b.committed else "abort", b.transactional_id,
                     req.client_id, err.name)
        return response(ApiKey.END_TXN, req.api_version, error_code=_fenced_for(req.api_version, 1, err), producer_id=-1,
                         producer_epoch=-1)


async def _call(host: str, port: int, req: Any, *, timeout: float = 10.0) -> Any:
    """One request on a fresh connection to another broker's Kafka port."""
    req.with_header(correlation_id=1, client_id="logquake-txn-coordinator")
    data = bytes(req.encode(header=True, framed=True))
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(data)
        await writer.drain()
        (n,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))
        body = await asyncio.wait_for(reader.readexactly(n), timeout)
    finally:
        writer.close()
    return req.header.get_response_class().decode(body, version=req.API_VERSION, header=True)

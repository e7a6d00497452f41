"""The Kafka APIs this broker serves, on top of a `Node`: the core ones here, and the
dispatch of every request through apis.py's table.

Each handler takes a decoded request and returns a response (or `NO_RESPONSE`, or an
awaitable of one). The synchronous part runs in request order per connection (server.py),
so a connection's produce requests are appended in the order they were sent.

Error codes are Kafka's. Every request refused for a reason a client should hear about is
logged once with the reason (at INFO, since clients retry these during failovers).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from logquake.broker import apis, responses, txn_index
from logquake.broker.apis import APIS, ApiKey
from logquake.broker.codec import Request
from logquake.broker.handlers_groups import GroupService
from logquake.broker.handlers_txn import TxnService
from logquake.broker.kerrors import ErrorCode
from logquake.broker.metadata import validate_topic_name
from logquake.broker.producer_state import Outcome
from logquake.broker.records import InvalidRecords, parse_batches
from logquake.broker.replica import AppendOutcome
from logquake.broker.server import NO_RESPONSE

if TYPE_CHECKING:
    from logquake.broker.node import Node

__all__ = ["KafkaApi"]

log = logging.getLogger("logquake.broker.api")

E = ErrorCode
CLUSTER_ID = "logquake"
_REQ_STAT = {k: f"req_{k}" for k in range(80)}  # the 5 s stats count requests per API key



class KafkaApi:
    """A node's Kafka front end: the core handlers below, and beside them the group and
    transaction services; `handle` dispatches each request as apis.py's table says."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.groups = GroupService(node)
        self.txn = TxnService(node)
        self._by_key = apis.bind(apis.Services(core=self, groups=self.groups, txn=self.txn))
        self.ack_early = node.cfg.unsafe.get("ack") == "early"
        self.dedup = node.cfg.unsafe.get("dedup") != "off"

    def handle(self, req: Request) -> Any:
        self.node.stats[_REQ_STAT.get(req.api_key, "req_other")] += 1
        return self._by_key[req.api_key](req)

    # ---- ApiVersions ---------------------------------------------------------------------------

    def api_versions(self, req: Request) -> Any:
        cls = APIS[ApiKey.API_VERSIONS].response[req.api_version]
        return cls(error_code=E.NONE, throttle_time_ms=0,
                   api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                             for k, lo, hi in apis.version_entries()],
                   supported_features=[], finalized_features_epoch=-1, finalized_features=[],
                   zk_migration_ready=False)

    # ---- Metadata -----------------------------------------------------------------------------

    def metadata(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        st = self.node.meta.state
        if b.topics is None or (v == 0 and not b.topics):
            names = sorted(st.topics)
        else:
            names = [t.name for t in b.topics]
        auto = self.node.cfg.auto_create_topics and (v < 4 or b.allow_auto_topic_creation)
        topics = [self._topic_metadata(name, auto) for name in names]
        brokers = [(n.node_id, n.host, n.kafka_port, None) for n in self.node.cfg.nodes]
        meta_leader = self.node.meta.raft.leader_id
        return responses.metadata_response(v, brokers, CLUSTER_ID,
                                           meta_leader if meta_leader is not None else -1, topics)

    def _topic_metadata(self, name: str, auto: bool) -> responses.MetadataTopic:
        info = self.node.meta.state.topics.get(name)
        if info is None:
            err = E.UNKNOWN_TOPIC_OR_PARTITION
            if auto and validate_topic_name(name) is None:
                self.node.request_topic(name)
                err = E.LEADER_NOT_AVAILABLE  # Kafka's answer while an auto-created topic comes up
            elif name and validate_topic_name(name) is not None:
                err = E.INVALID_TOPIC_EXCEPTION
            return (err, name, None, False, ())
        parts, coming_up = [], False
        for p in info.partitions:
            leader, epoch = self.node.leader_of(p.group_id)
            # No leader yet in the first term (or none known here): the topic is still being
            # created. Kafka answers that at topic level, and librdkafka keeps re-asking every
            # retry.backoff.ms only then; a partition without a leader waits for its 1 s scan.
            coming_up |= leader < 0 and epoch <= 1
            parts.append((E.NONE if leader >= 0 else E.LEADER_NOT_AVAILABLE, p.partition, leader, epoch,
                          p.replicas, p.replicas, ()))
        if coming_up:
            return (E.LEADER_NOT_AVAILABLE, name, info.topic_id, False, ())
        return (E.NONE, name, info.topic_id, False, parts)

    # ---- Produce ------------------------------------------------------------------------------

    def produce(self, req: Request) -> Any:
        b = req.body
        acks = b.acks
        results: list[tuple[str, int, Any]] = []
        for t in b.topic_data:
            for p in t.partition_data:
                if acks not in (0, 1, -1):
                    out: Any = AppendOutcome(error_code=E.INVALID_REQUIRED_ACKS)
                else:
                    out = self._produce_one(t.name, p.index, p.records, acks, req)
                results.append((t.name, p.index, out))
        if acks == 0:
            return NO_RESPONSE
        if all(isinstance(o, AppendOutcome) for _, _, o in results):
            return self._produce_response(req, results)
        return self._produce_wait(req, results)

    def _produce_one(self, topic: str, partition: int, records: bytes | None, acks: int, req: Request) -> Any:
        rep, err = self._leader_replica(topic, partition, auto_create=True)
        if rep is None:
            self._reject(req, topic, partition, err)
            return AppendOutcome(error_code=err)
        try:
            headers = parse_batches(records or b"")
            if not headers:
                raise InvalidRecords("no record batches")
        except InvalidRecords as e:
            log.warning("rejected produce to %s-%d from %s: %s", topic, partition, req.client_id, e)
            return AppendOutcome(error_code=E.CORRUPT_MESSAGE)
        verdict = rep.check_producer(records, headers, dedup=self.dedup)
        if verdict is not None:
            if verdict.outcome is Outcome.DUPLICATE:
                return AppendOutcome(error_code=E.NONE, base_offset=verdict.base_offset or 0)
            self._reject(req, topic, partition, int(verdict.error))
            return AppendOutcome(error_code=int(verdict.error))
        # Unsafe `ack: early` is read here only: acks=all is answered after the leader's append.
        eff = 1 if (acks == -1 and self.ack_early) else acks
        out = rep.append(records, headers, eff)
        self.node.stats["produced_bytes"] += len(records)
        self.node.kick()
        return out

    def _leader_replica(self, topic: str, partition: int, *, auto_create: bool = False) -> tuple[Any, int]:
        info = self.node.meta.state.topics.get(topic)
        if info is None:
            if auto_create and self.node.cfg.auto_create_topics and validate_topic_name(topic) is None:
                self.node.request_topic(topic)
            return None, E.UNKNOWN_TOPIC_OR_PARTITION
        if not 0 <= partition < len(info.partitions):
            return None, E.UNKNOWN_TOPIC_OR_PARTITION
        rep = self.node.partitions.get(info.partitions[partition].group_id)
        if rep is None or not rep.is_ready_leader:
            return None, E.NOT_LEADER_OR_FOLLOWER
        return rep, E.NONE

    def _reject(self, req: Request, topic: str, partition: int, err: int) -> None:
        log.info("api %d from %s for %s-%d answered with error %d", req.api_key, req.client_id, topic,
                 partition, err)

    def _produce_wait(self, req: Request, results: list[tuple[str, int, Any]]) -> asyncio.Future[Any]:
        """The response once every append future is resolved or the request's timeout passed.

        Callbacks on one future rather than a task around asyncio.wait: this is every acks=1
        and acks=all produce, and the task and the wait's own futures cost more than the rest
        of the handler."""
        loop = asyncio.get_running_loop()
        out: asyncio.Future[Any] = loop.create_future()
        futs = [o for _, _, o in results if isinstance(o, asyncio.Future)]
        left = len(futs)

        def finish() -> None:
            if out.done():
                return
            timer.cancel()
            final = []
            for t, p, o in results:
                if isinstance(o, asyncio.Future):
                    if o.done() and not o.cancelled():
                        o = o.result()
                    else:
                        log.info("produce to %s-%d from %s timed out before commit", t, p, req.client_id)
                        o = AppendOutcome(error_code=E.REQUEST_TIMED_OUT)
                final.append((t, p, o))
            out.set_result(self._produce_response(req, final))

        def one_done(_: asyncio.Future[Any]) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                finish()

        timer = loop.call_later(max(req.body.timeout_ms, 1) / 1000, finish)
        for f in futs:
            f.add_done_callback(one_done)
        return out

    def _produce_response(self, req: Request, results: list[tuple[str, int, AppendOutcome]]) -> Any:
        return responses.produce_response(req.api_version, [(t, p, o.error_code, o.base_offset)
                                                            for t, p, o in results])

    # ---- Fetch --------------------------------------------------------------------------------

    def fetch(self, req: Request) -> Any:
        b = req.body
        topics, size, watch, errors = self._fetch_once(req)
        if size >= b.min_bytes or b.max_wait_ms <= 0 or errors or not watch:
            return self._fetch_response(req, topics)
        return self._fetch_wait(req, watch)

    async def _fetch_wait(self, req: Request, watch: list[tuple[Any, int]]) -> Any:
        """Long poll: one future, woken by any watched partition's new commits or the deadline.

        A wake-up only counts the bytes now readable (no response is built) until they
        reach min_bytes or a partition stops being ours to serve; then one response.

        Counted before each wait too, the first included: `fetch` read the log in the
        server's data_received, and this runs as a task a loop turn or more later; a commit
        applied in between woke no one, and without the count the poll slept to max_wait."""
        b = req.body
        loop = asyncio.get_running_loop()
        deadline = loop.time() + b.max_wait_ms / 1000
        read_committed = b.isolation_level == 1
        leak = self.node.cfg.unsafe.get("read_committed") == "leak"
        while (remaining := deadline - loop.time()) > 0:
            if _readable(watch, b.min_bytes, read_committed, leak) >= b.min_bytes:
                break
            woken: asyncio.Future[None] = loop.create_future()  # no await from the count to here
            for rep, _ in watch:
                rep.wake_on_data(woken)
            timer = loop.call_later(remaining, _set_none, woken)
            try:
                await woken
            finally:
                timer.cancel()
        topics, _, _, _ = self._fetch_once(req)
        return self._fetch_response(req, topics)

    def _fetch_once(self, req: Request) -> tuple[list[Any], int, list[tuple[Any, int]], bool]:
        b = req.body
        read_committed = b.isolation_level == 1
        leak = self.node.cfg.unsafe.get("read_committed") == "leak"
        budget = b.max_bytes if b.max_bytes > 0 else 1 << 62
        total, errors, watch, topics = 0, False, [], []
        for t in b.topics:
            parts: list[responses.FetchPartition] = []
            for p in t.partitions:
                rep, err = self._leader_replica(t.topic, p.partition)
                hw = lso = -1
                start = 0
                records = b""
                aborted = [] if read_committed else None
                if rep is not None:
                    st = rep.state
                    hw, lso = st.next_offset, st.last_stable_offset
                    start = st.log_start_offset
                    if not start <= p.fetch_offset <= hw:
                        err = E.OFFSET_OUT_OF_RANGE
                    else:
                        upper = txn_index.fetch_upper_bound(st.txns, hw, read_committed=read_committed, leak=leak)
                        records = self._read(rep, p.fetch_offset, upper, min(p.partition_max_bytes, budget),
                                              first=total == 0)
                        if read_committed and records:
                            aborted = [(a.producer_id, a.first_offset)
                                       for a in txn_index.aborted_between(st.txns, p.fetch_offset, upper)]
                        budget -= len(records)
                        total += len(records)
                        watch.append((rep, p.fetch_offset))
                if err != E.NONE:
                    errors = True
                    self._reject(req, t.topic, p.partition, err)
                parts.append((p.partition, err, hw, lso, start, aborted, records))
            topics.append((t.topic, parts))
        return topics, total, watch, errors

    @staticmethod
    def _read(rep: Any, offset: int, upto: int, max_bytes: int, *, first: bool) -> bytes:
        return rep.state.read(offset, upto, max_bytes, first=first)

    def _fetch_response(self, req: Request, topics: list[Any]) -> Any:
        return responses.fetch_response(req.api_version, topics)

    # ---- ListOffsets --------------------------------------------------------------------------

    def list_offsets(self, req: Request) -> Any:
        b = req.body
        cls = APIS[ApiKey.LIST_OFFSETS].response[req.api_version]
        T = cls.ListOffsetsTopicResponse
        topics = []
        for t in b.topics:
            parts = []
            for p in t.partitions:
                rep, err = self._leader_replica(t.name, p.partition_index)
                ts, off, epoch = -1, -1, -1
                if rep is None:
                    self._reject(req, t.name, p.partition_index, err)
                else:
                    st = rep.state
                    epoch = rep.raft.term
                    if p.timestamp == -1:  # latest: the LSO for read_committed consumers
                        off = st.last_stable_offset if b.isolation_level == 1 else st.next_offset
                    elif p.timestamp == -2:  # earliest
                        off = st.log_start_offset
                    elif p.timestamp == -3:  # max timestamp (KIP-734)
                        if (best := st.max_timestamp()) is not None:
                            ts, off = best
                    else:
                        found = st.offset_for_timestamp(p.timestamp)
                        if found is not None:
                            off, ts = found
                    if off >= 0 and p.timestamp != -1:
                        # Kafka's epochForOffset: the epoch that wrote the record there (a
                        # consumer validates its position with it after a leader change).
                        written = st.epoch_for_offset(off)
                        epoch = written if written >= 0 else epoch
                parts.append(T.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=err,
                                                            timestamp=ts, offset=off, leader_epoch=epoch))
            topics.append(T(name=t.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # ---- OffsetForLeaderEpoch ----------------------------------------------------------------

    def offset_for_leader_epoch(self, req: Request) -> Any:
        """KIP-320: where a leader epoch ends, so a consumer can detect a truncated log."""
        cls = APIS[ApiKey.OFFSET_FOR_LEADER_EPOCH].response[req.api_version]
        T = cls.OffsetForLeaderTopicResult
        topics = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                rep, err = self._leader_replica(t.topic, p.partition)
                epoch, end = -1, -1
                if rep is not None:
                    term = rep.raft.term
                    if p.current_leader_epoch >= 0 and p.current_leader_epoch != term:
                        err = E.FENCED_LEADER_EPOCH if p.current_leader_epoch < term else E.UNKNOWN_LEADER_EPOCH
                    else:
                        epoch, end = rep.state.end_offset_for_epoch(p.leader_epoch, current_epoch=term)
                        first = rep.state.epochs[0][0] if rep.state.epochs else term
                        if end < 0 or p.leader_epoch < first:
                            # librdkafka resets the position by auto.offset.reset on these answers
                            log.info("OffsetForLeaderEpoch %s-%d from %s: epoch %d -> (%d, %d), known epochs %s",
                                     t.topic, p.partition, req.client_id, p.leader_epoch, epoch, end,
                                     rep.state.epochs[:8])
                if err != E.NONE:
                    self._reject(req, t.topic, p.partition, err)
                parts.append(T.EpochEndOffset(error_code=err, partition=p.partition, leader_epoch=epoch,
                                              end_offset=end))
            topics.append(T(topic=t.topic, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # ---- CreateTopics -------------------------------------------------------------------------

    def create_topics(self, req: Request) -> Any:
        return self._create_topics(req)

    async def _create_topics(self, req: Request) -> Any:
        b = req.body
        cls = APIS[ApiKey.CREATE_TOPICS].response[req.api_version]
        n_nodes = len(self.node.node_ids)
        jobs = []
        for t in b.topics:
            n = self.node.cfg.default_partitions if t.num_partitions == -1 else t.num_partitions
            rf = (min(self.node.cfg.default_replication_factor, n_nodes) if t.replication_factor == -1
                  else t.replication_factor)
            jobs.append((t.name, n, rf, self._create_one(t.name, n, rf, bool(b.validate_only), t.assignments,
                                                          b.timeout_ms)))
        out = []
        for name, n, rf, job in jobs:
            err, msg = await job
            if err:
                log.info("CreateTopics %s from %s: error %d (%s)", name, req.client_id, err, msg)
            out.append(cls.CreatableTopicResult(name=name, error_code=err, error_message=msg,
                                                num_partitions=n if not err else -1,
                                                replication_factor=rf if not err else -1, configs=None))
        return cls(throttle_time_ms=0, topics=out)

    async def _create_one(self, name: str, n: int, rf: int, validate_only: bool, assignments: Any,
                          timeout_ms: int) -> tuple[int, str | None]:
        if name in self.node.meta.state.topics:
            return E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        reason = validate_topic_name(name)
        if reason:
            return E.INVALID_TOPIC_EXCEPTION, reason
        if assignments:
            return E.INVALID_REQUEST, "manual replica assignments are not supported"
        if n < 1:
            return E.INVALID_PARTITIONS, f"partitions must be >= 1, got {n}"
        if not 1 <= rf <= len(self.node.node_ids):
            return E.INVALID_REPLICATION_FACTOR, f"replication factor must be in [1, {len(self.node.node_ids)}]"
        if validate_only:
            return E.NONE, None
        return await self.node.create_topic(name, n, rf, timeout=max(timeout_ms, 1000) / 1000)

    # ---- InitProducerId -----------------------------------------------------------------------

    def init_producer_id(self, req: Request) -> Any:
        """An idempotent producer's id (a transactional id is the transaction coordinator's:
        `TxnService.init_producer_id` hands only the others over to here)."""
        return self._init_producer_id(req)

    async def _init_producer_id(self, req: Request) -> Any:
        b = req.body
        cls = APIS[ApiKey.INIT_PRODUCER_ID].response[req.api_version]
        if req.api_version >= 3 and b.producer_id >= 0 and 0 <= b.producer_epoch < 32766:
            # KIP-360: an idempotent producer bumps its own epoch after an error; the id stays.
            return cls(throttle_time_ms=0, error_code=E.NONE, producer_id=b.producer_id,
                       producer_epoch=b.producer_epoch + 1)
        pid = await self.node.new_producer_id()
        if pid is None:
            return cls(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
        return cls(throttle_time_ms=0, error_code=E.NONE, producer_id=pid, producer_epoch=0)


def _set_none(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _readable(watch: list[tuple[Any, int]], enough: int, read_committed: bool, leak: bool) -> int:
    """Bytes a fetch from these (replica, offset) positions would now return, counted up to
    `enough`; `enough` at once when a replica stopped leading (the answer is an error)."""
    total = 0
    for rep, offset in watch:
        st = rep.state
        if not rep.is_ready_leader or not st.log_start_offset <= offset <= st.next_offset:
            return enough
        upper = txn_index.fetch_upper_bound(st.txns, st.next_offset, read_committed=read_committed, leak=leak)
        total += st.readable(offset, upper)
        if total >= enough:
            return total
    return total

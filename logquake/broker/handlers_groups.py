"""Consumer-group Kafka APIs on a `Node`: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup,
OffsetCommit, OffsetFetch.

The coordinator of a group is the ready Raft leader of `__consumer_offsets` partition
crc32(group) % OFFSETS_PARTITIONS (created on the first FindCoordinator). Per such partition
this node leads, a `_Shard` holds:
- the committed offsets and group records, folded from the partition's committed batches
  (`offsets_log.apply_batch`) up to the high watermark before every request, so what a new
  leader serves is exactly what the log says;
- the live `groups.Group` membership machines, restored from the last group record when the
  shard is made, and dropped (answering parked requests NOT_COORDINATOR) when leadership or
  term changes.
JoinGroup and SyncGroup park their request on a future until the group machine returns a
reply for that member; a ticker drives session and rebalance timeouts with the monotonic clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from logquake.broker import group_offsets as go
from logquake.broker import offsets_log
from logquake.broker.apis import APIS, ApiKey, response
from logquake.broker.coordination import (
    COORDINATOR_TOPICS,
    OFFSETS_TOPIC,
    FoldedShard,
    append_committed,
    coordinator_leader,
    coordinator_replica,
)
from logquake.broker.groups import Group, GroupConfig, GroupState, JoinReply, SyncReply
from logquake.broker.kerrors import ErrorCode

if TYPE_CHECKING:
    from logquake.broker.codec import Request
    from logquake.broker.node import Node

__all__ = ["GroupService"]

log = logging.getLogger("logquake.broker.groups")

TICK_S = 0.1
E = ErrorCode


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _commit_records(body: Any, *, producer_id: int = go.NO_PRODUCER_ID) -> list[go.OffsetCommitRecord]:
    """The offsets an OffsetCommit or TxnOffsetCommit request asks to write, stamped now."""
    now = int(time.time() * 1000)
    return [go.OffsetCommitRecord(
        key=go.OffsetKey(body.group_id, t.name, p.partition_index),
        value=go.CommittedOffset(offset=p.committed_offset, metadata=p.committed_metadata or "",
                                 leader_epoch=getattr(p, "committed_leader_epoch", -1), commit_ms=now),
        producer_id=producer_id)
        for t in body.topics for p in t.partitions]


def _commit_response(req: Request, err: ErrorCode, name: str, topic: Any, partition: Any) -> Any:
    """The answer to an OffsetCommit or TxnOffsetCommit (`name`): `err` for every partition asked
    about, made with the response's `topic` and `partition` classes; a refusal is logged."""
    if err:
        log.info("%s of group %r from %s: %s", name, req.body.group_id, req.client_id, err.name)
    return response(req.api_key, req.api_version, topics=[
        topic(name=t.name, partitions=[partition(partition_index=p.partition_index, error_code=int(err))
                                       for p in t.partitions])
        for t in req.body.topics])


class _Shard(FoldedShard[go.OffsetsState]):
    """What this node, as leader of one `__consumer_offsets` partition in one term, coordinates:
    `state` holds the committed offsets and group records."""

    def __init__(self, rep: Any, config: GroupConfig) -> None:
        super().__init__(rep, go.EMPTY, offsets_log.apply_batch)
        self.config = config
        self.groups: dict[str, Group] = {}
        self.persisted: dict[str, int] = {}  # group -> generation of its last group record

    def group(self, group_id: str, now_ms: int) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            record = self.state.groups.get(group_id)
            if record is not None:
                g = Group.restore(record, now_ms=now_ms, config=self.config)
                self.persisted[group_id] = record.generation
            else:
                g = Group(group_id=group_id, config=self.config)
            self.groups[group_id] = g
        return g


class GroupService:
    """The handlers; state lives in `_Shard`s, parked requests in `waiters`."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.config = GroupConfig()
        self.shards: dict[int, _Shard] = {}
        self.waiters: dict[tuple[str, str, str], list[asyncio.Future[Any]]] = {}
        self._ticker: asyncio.Task[None] | None = None

    # ---- coordinator lookup ---------------------------------------------------------------

    def _shard(self, group_id: str) -> tuple[_Shard | None, ErrorCode]:
        index, rep, err = coordinator_replica(self.node, OFFSETS_TOPIC, group_id)
        if rep is None:
            return None, err
        shard = self.shards.get(index)
        if shard is None or shard.term != rep.raft.term or shard.rep is not rep:
            if shard is not None:
                self._drop(shard)
            shard = self.shards[index] = _Shard(rep, self.config)
        shard.catch_up()
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())
        return shard, E.NONE

    def _drop(self, shard: _Shard) -> None:
        """Leadership moved: parked requests learn it, and the membership state goes."""
        for group_id in shard.groups:
            for (gid, member_id, kind), futs in list(self.waiters.items()):
                if gid == group_id:
                    del self.waiters[(gid, member_id, kind)]
                    reply_cls = JoinReply if kind == "join" else SyncReply
                    for f in futs:
                        if not f.done():
                            f.set_result(reply_cls(member_id=member_id, error=E.NOT_COORDINATOR))
        self.shards = {i: s for i, s in self.shards.items() if s is not shard}

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._tick()
            except Exception:
                log.exception("group coordinator tick failed")

    def _tick(self) -> None:
        now = _now_ms()
        for shard in list(self.shards.values()):
            if not shard.rep.is_ready_leader or shard.rep.raft.term != shard.term:
                log.info("%s: no longer coordinator (term %d)", shard.rep.name, shard.term)
                self._drop(shard)
                continue
            for g in list(shard.groups.values()):
                self._deliver(g.group_id, g.tick(now_ms=now))
                self._persist(shard, g)

    # ---- parking ----------------------------------------------------------------------------

    def _park(self, group_id: str, member_id: str, kind: str) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault((group_id, member_id, kind), []).append(fut)
        return fut

    def _unpark(self, group_id: str, member_id: str, kind: str, fut: asyncio.Future[Any]) -> None:
        futs = self.waiters.get((group_id, member_id, kind), [])
        if fut in futs:
            futs.remove(fut)
        if not futs:
            self.waiters.pop((group_id, member_id, kind), None)

    def _deliver(self, group_id: str, replies: list[Any]) -> None:
        for r in replies:
            kind = "join" if isinstance(r, JoinReply) else "sync"
            for f in self.waiters.pop((group_id, r.member_id, kind), []):
                if not f.done():
                    f.set_result(r)

    def _persist(self, shard: _Shard, g: Group) -> None:
        """Write a group record when a generation became Stable or Empty (fire and forget)."""
        if g.state not in (GroupState.STABLE, GroupState.EMPTY) or shard.persisted.get(g.group_id) == g.generation:
            return
        if g.state is GroupState.EMPTY and g.group_id not in shard.persisted and g.generation == 0:
            return  # a group only ever used for offsets
        shard.persisted[g.group_id] = g.generation
        log.info("group %r generation %d %s: members %s, leader %s, protocol %s", g.group_id, g.generation,
                 g.state.value, sorted(g.members), g.leader_id, g.protocol_name)
        out = self._append(shard, offsets_log.encode_group(g.snapshot()))
        asyncio.ensure_future(out)

    async def _append(self, shard: _Shard, batch: bytes) -> ErrorCode:
        """Append through Raft and wait for commit; NOT_COORDINATOR if leadership went."""
        out = await append_committed(self.node, shard.rep, batch)
        if out is None or out.error_code == E.NOT_LEADER_OR_FOLLOWER:
            return E.NOT_COORDINATOR
        if out.error_code:
            return E(out.error_code) if out.error_code in E._value2member_map_ else E.COORDINATOR_NOT_AVAILABLE
        shard.catch_up()
        return E.NONE

    async def _commit(self, shard: _Shard, records: list[go.OffsetCommitRecord]) -> ErrorCode:
        """Append committed offsets (none: nothing to do) and wait for their commit."""
        return await self._append(shard, offsets_log.encode_offsets(records)) if records else E.NONE

    # ---- FindCoordinator ----------------------------------------------------------------------

    def find_coordinator(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        keys = list(b.coordinator_keys) if v >= 4 else [b.key]
        key_type = b.key_type if v >= 1 else 0
        found = [self._coordinator(k, key_type) for k in keys]
        if v >= 4:
            cls = APIS[ApiKey.FIND_COORDINATOR].response[v]
            return response(ApiKey.FIND_COORDINATOR, req.api_version, coordinators=[
                cls.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e, error_message=None)
                for k, (e, n, h, p) in zip(keys, found, strict=True)])
        e, n, h, p = found[0]
        return response(ApiKey.FIND_COORDINATOR, req.api_version, error_code=e, error_message=None, node_id=n, host=h, port=p)

    def _coordinator(self, key: str, key_type: int) -> tuple[int, int, str, int]:
        none = (int(E.COORDINATOR_NOT_AVAILABLE), -1, "", -1)
        topic = COORDINATOR_TOPICS.get(key_type)
        if topic is None:
            return none
        leader = coordinator_leader(self.node, topic, key)
        addr = next((n for n in self.node.cfg.nodes if n.node_id == leader), None)
        if addr is None:
            return none
        return int(E.NONE), addr.node_id, addr.host, addr.kafka_port

    # ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -------------------------------------

    async def join_group(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        shard, err = self._shard(b.group_id)
        if err:
            return self._join_response(req, JoinReply(member_id=b.member_id, error=err))
        now = _now_ms()
        g = shard.group(b.group_id, now)
        new_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
        parked_as = b.member_id or new_id
        fut = self._park(b.group_id, parked_as, "join")
        rebalance_ms = b.rebalance_timeout_ms if v >= 1 else b.session_timeout_ms
        replies = g.join(member_id=b.member_id, new_member_id=new_id, client_id=req.client_id or "",
                         client_host="", session_timeout_ms=b.session_timeout_ms, rebalance_timeout_ms=rebalance_ms,
                         protocol_type=b.protocol_type, protocols=[(p.name, p.metadata) for p in b.protocols],
                         now_ms=now)
        mine = [r for r in replies if r.member_id == b.member_id and isinstance(r, JoinReply) and r.error]
        if mine and not b.member_id:  # refused before it got an id
            self._unpark(b.group_id, parked_as, "join", fut)
            return self._join_response(req, mine[0])
        self._deliver(b.group_id, replies)
        self._persist(shard, g)
        try:
            reply = await asyncio.wait_for(fut, rebalance_ms / 1000 + 30)
        except TimeoutError:
            self._unpark(b.group_id, parked_as, "join", fut)
            reply = JoinReply(member_id=parked_as, error=E.REBALANCE_IN_PROGRESS)
        return self._join_response(req, reply)

    def _join_response(self, req: Request, r: JoinReply) -> Any:
        cls = APIS[ApiKey.JOIN_GROUP].response[req.api_version]
        return response(ApiKey.JOIN_GROUP, req.api_version, error_code=int(r.error), generation_id=r.generation,
                         protocol_type=r.protocol_type, protocol_name=r.protocol_name or "", leader=r.leader_id,
                         member_id=r.member_id, members=[
                             cls.JoinGroupResponseMember(member_id=m, group_instance_id=None, metadata=meta)
                             for m, meta in r.members])

    async def sync_group(self, req: Request) -> Any:
        b = req.body
        shard, err = self._shard(b.group_id)
        if err:
            return self._sync_response(req, SyncReply(member_id=b.member_id, error=err))
        g = shard.group(b.group_id, _now_ms())
        fut = self._park(b.group_id, b.member_id, "sync")
        assignments = {a.member_id: a.assignment for a in b.assignments} if b.assignments else None
        self._deliver(b.group_id, g.sync(member_id=b.member_id, generation=b.generation_id, assignments=assignments,
                                         now_ms=_now_ms()))
        self._persist(shard, g)
        try:
            reply = await asyncio.wait_for(fut, 300)
        except TimeoutError:
            self._unpark(b.group_id, b.member_id, "sync", fut)
            reply = SyncReply(member_id=b.member_id, error=E.REBALANCE_IN_PROGRESS)
        return self._sync_response(req, reply)

    def _sync_response(self, req: Request, r: SyncReply) -> Any:
        return response(ApiKey.SYNC_GROUP, req.api_version, error_code=int(r.error), protocol_type=r.protocol_type,
                         protocol_name=r.protocol_name, assignment=r.assignment)

    def heartbeat(self, req: Request) -> Any:
        b = req.body
        shard, err = self._shard(b.group_id)
        if not err:
            err = shard.group(b.group_id, _now_ms()).heartbeat(member_id=b.member_id, generation=b.generation_id,
                                                               now_ms=_now_ms())
        return response(ApiKey.HEARTBEAT, req.api_version, error_code=int(err))

    def leave_group(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        ids = [m.member_id for m in b.members] if v >= 3 else [b.member_id]
        shard, err = self._shard(b.group_id)
        errors = dict.fromkeys(ids, err)
        if not err:
            g = shard.group(b.group_id, _now_ms())
            errors, replies = g.leave(member_ids=ids, now_ms=_now_ms())
            self._deliver(b.group_id, replies)
            self._persist(shard, g)
        cls = APIS[ApiKey.LEAVE_GROUP].response[v]
        top = err if v >= 3 else errors[ids[0]]
        return response(ApiKey.LEAVE_GROUP, req.api_version, error_code=int(top), members=[
            cls.MemberResponse(member_id=m, group_instance_id=None, error_code=int(e)) for m, e in errors.items()])

    # ---- OffsetCommit / OffsetFetch -----------------------------------------------------------

    async def offset_commit(self, req: Request) -> Any:
        b = req.body
        shard, err = self._shard(b.group_id)
        if not err:
            err = shard.group(b.group_id, _now_ms()).check_offset_commit(
                member_id=b.member_id, generation=b.generation_id_or_member_epoch, now_ms=_now_ms())
        if not err:
            err = await self._commit(shard, _commit_records(b))
        T = APIS[ApiKey.OFFSET_COMMIT].response[req.api_version].OffsetCommitResponseTopic
        return _commit_response(req, err, "OffsetCommit", T, T.OffsetCommitResponsePartition)

    def offset_fetch(self, req: Request) -> Any:
        b, v = req.body, req.api_version
        shard, err = self._shard(b.group_id)
        cls = APIS[ApiKey.OFFSET_FETCH].response[v]
        T = cls.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        if err:
            topics = [T(name=t.name, partitions=[P(partition_index=i, committed_offset=-1, committed_leader_epoch=-1,
                                                   metadata="", error_code=int(err)) for i in t.partition_indexes])
                      for t in (b.topics or [])]
            return response(ApiKey.OFFSET_FETCH, req.api_version, error_code=int(err), topics=topics)
        wanted: dict[str, list[int]] = {}
        if b.topics is None:  # v2+: every partition the group has an offset for
            for key in shard.state.committed:
                if key.group_id == b.group_id:
                    wanted.setdefault(key.topic, []).append(key.partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in b.topics}
        stable = bool(getattr(b, "require_stable", False)) and v >= 7
        topics = []
        for name, indexes in wanted.items():
            parts = []
            for i in sorted(indexes):
                value, perr = go.fetch(shard.state, go.OffsetKey(b.group_id, name, i), require_stable=stable)
                parts.append(P(partition_index=i, committed_offset=value.offset if value else -1,
                               committed_leader_epoch=value.leader_epoch if value else -1,
                               metadata=value.metadata if value else "", error_code=int(perr)))
            topics.append(T(name=name, partitions=parts))
        return response(ApiKey.OFFSET_FETCH, req.api_version, error_code=E.NONE, topics=topics)

    async def txn_offset_commit(self, req: Request) -> Any:
        """TxnOffsetCommit: offsets written now, visible when the transaction's COMMIT marker lands here."""
        b = req.body
        shard, err = self._shard(b.group_id)
        if not err:
            err = await self._commit(shard, _commit_records(b, producer_id=b.producer_id))
        T = APIS[ApiKey.TXN_OFFSET_COMMIT].response[req.api_version].TxnOffsetCommitResponseTopic
        return _commit_response(req, err, "TxnOffsetCommit", T, T.TxnOffsetCommitResponsePartition)

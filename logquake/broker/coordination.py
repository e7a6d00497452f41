"""What the group and transaction coordinators share: their internal topics, which partition
coordinates a key, the state folded from that partition's log, and appending to it.

A coordinator is the ready Raft leader of one partition of an internal topic
(`__consumer_offsets` for groups, `__transaction_state` for transactional ids), chosen by
crc32(key) % OFFSETS_PARTITIONS. Its state is what the partition's committed batches fold to,
up to the high watermark before every request, so what a new leader serves is exactly what
the log says.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from logquake.broker.kerrors import ErrorCode
from logquake.broker.metadata import create_topic_entry
from logquake.broker.records import parse_batches

if TYPE_CHECKING:
    from logquake.broker.node import Node
    from logquake.broker.replica import AppendOutcome, PartitionReplica

__all__ = [
    "COORDINATOR_TOPICS",
    "OFFSETS_PARTITIONS",
    "OFFSETS_TOPIC",
    "TXN_STATE_TOPIC",
    "FoldedShard",
    "append_committed",
    "coordinator_leader",
    "coordinator_partition",
    "coordinator_replica",
    "ensure_topic",
]

OFFSETS_TOPIC = "__consumer_offsets"
TXN_STATE_TOPIC = "__transaction_state"
_FOLD_CHUNK = 1024  # batches folded per read: those out of the payload window come in one read each
OFFSETS_PARTITIONS = 3  # for both topics; Kafka has 50, but every partition here is a Raft group
COORDINATOR_TOPICS = {0: OFFSETS_TOPIC, 1: TXN_STATE_TOPIC}  # FindCoordinator key type -> topic

S = TypeVar("S")


def coordinator_partition(key: str) -> int:
    """The partition (of either internal topic) whose leader coordinates a group or transactional id."""
    return zlib.crc32(key.encode()) % OFFSETS_PARTITIONS


def ensure_topic(node: Node, topic: str) -> None:
    """Ask the metadata group for an internal topic (a no-op once it exists)."""
    node.propose_metadata(create_topic_entry(topic, OFFSETS_PARTITIONS, min(3, len(node.node_ids))))


def coordinator_leader(node: Node, topic: str, key: str) -> int:
    """The node leading the partition of `topic` that coordinates `key` as known here (-1: none),
    asking for the topic if it is missing."""
    info = node.meta.state.topics.get(topic)
    if info is None:
        ensure_topic(node, topic)
        return -1
    leader, _ = node.leader_of(info.partitions[coordinator_partition(key)].group_id)
    return leader


def coordinator_replica(node: Node, topic: str, key: str) -> tuple[int, PartitionReplica | None, ErrorCode]:
    """(partition index, this node's replica, NONE) when this node is the ready leader coordinating
    `key` in `topic`; else (-1, None, the error to answer), asking for the topic if it is missing."""
    info = node.meta.state.topics.get(topic)
    if info is None:
        ensure_topic(node, topic)
        return -1, None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    index = coordinator_partition(key)
    rep = node.partitions.get(info.partitions[index].group_id)
    if rep is None or not rep.is_ready_leader:
        return -1, None, ErrorCode.NOT_COORDINATOR
    return index, rep, ErrorCode.NONE


class FoldedShard(Generic[S]):
    """This node as leader of one internal partition in one term, with `state` folded from the
    partition's committed batches up to Kafka offset `applied`."""

    def __init__(self, rep: Any, empty: S, fold: Callable[[S, bytes], S],
                 fold_many: Callable[[S, list[bytes]], S] | None = None) -> None:
        self.rep = rep
        self.term = rep.raft.term
        self.state = empty
        self.applied = 0  # next Kafka offset of the partition to fold in
        self._fold = fold
        self._fold_many = fold_many  # the same as `fold` over a list, cheaper

    def catch_up(self) -> None:
        """Fold the batches committed since the last call."""
        st = self.rep.state
        while chunk := st.batches_from(self.applied, _FOLD_CHUNK):  # older batches come a chunk at a time
            if self._fold_many is not None:
                self.state = self._fold_many(self.state, [data for _, data in chunk])
                self.applied = chunk[-1][0] + 1
                continue
            for last, data in chunk:
                self.state = self._fold(self.state, data)
                self.applied = last + 1

    @property
    def current(self) -> bool:
        """Still this node's to serve: the replica leads, ready, in the shard's term."""
        return self.rep.is_ready_leader and self.rep.raft.term == self.term


async def append_committed(node: Node, rep: PartitionReplica, batch: bytes, *,
                           timeout: float = 30.0) -> AppendOutcome | None:
    """Append `batch` through Raft as acks=all and wait for its commit; None if `timeout` passed first."""
    out = rep.append(batch, parse_batches(batch), -1)
    node.kick()
    if isinstance(out, asyncio.Future):
        try:
            return await asyncio.wait_for(out, timeout)
        except TimeoutError:
            return None
    return out

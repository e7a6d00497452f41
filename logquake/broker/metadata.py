"""The metadata group's state machine: topics, partition -> Raft group and replicas, producer ids.

Every node is a voter of the metadata group (Raft group 0) and applies its committed entries
with `apply_metadata`, deterministic and without I/O, so all nodes agree on which Raft group
serves which partition and on which nodes. Payloads are small JSON objects (metadata changes
are rare; readability of the log wins over compactness):

    {"op": "create_topic", "name": str, "partitions": int, "replication_factor": int}
    {"op": "alloc_producer_ids", "count": int, "node": int, "nonce": str}
                                                      -> a block of fresh producer ids for `node`
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from logquake.broker.kerrors import ErrorCode

__all__ = [
    "METADATA_GROUP",
    "MetadataState",
    "PartitionInfo",
    "TopicInfo",
    "apply_metadata",
    "create_topic_entry",
    "alloc_producer_ids_entry",
    "validate_topic_name",
]

METADATA_GROUP = 0
_TOPIC_NS = uuid.UUID("5c0c3f0e-7d8b-4b43-9a34-6c6f67717561")
E = ErrorCode


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    group_id: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]


@dataclass(kw_only=True)
class MetadataState:
    """Committed metadata. Mutated only by `apply_metadata`."""

    node_ids: tuple[int, ...]
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    groups: dict[int, PartitionInfo] = field(default_factory=dict)
    next_group: int = METADATA_GROUP + 1
    next_replica_start: int = 0  # rotates the first replica across topics, as Kafka does
    next_producer_id: int = 1000
    # node id -> (nonce, first id, count) of its latest block, so the requester finds its answer
    producer_id_blocks: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    applied_index: int = 0


def create_topic_entry(name: str, partitions: int, replication_factor: int) -> bytes:
    return json.dumps({"op": "create_topic", "name": name, "partitions": partitions,
                       "replication_factor": replication_factor}).encode()


def alloc_producer_ids_entry(count: int, *, node: int, nonce: str) -> bytes:
    return json.dumps({"op": "alloc_producer_ids", "count": count, "node": node, "nonce": nonce}).encode()


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic name rule; returns the reason it is invalid, or None."""
    if not name or name in (".", ".."):
        return "topic name is empty, '.' or '..'"
    if len(name) > 249:
        return "topic name longer than 249 characters"
    if not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        return "topic name may only contain ASCII alphanumerics, '.', '_' and '-'"
    return None


def apply_metadata(state: MetadataState, *, index: int, data: bytes) -> dict[str, Any]:
    """Apply one committed metadata entry; returns its result ({"error_code": 0, ...})."""
    state.applied_index = index
    if not data:
        return {"error_code": E.NONE}
    try:
        op = json.loads(data)
    except ValueError:
        return {"error_code": E.UNKNOWN_SERVER_ERROR, "error": "undecodable metadata entry"}
    if op.get("op") == "create_topic":
        return _create_topic(state, op)
    if op.get("op") == "alloc_producer_ids":
        first, count = state.next_producer_id, int(op["count"])
        state.next_producer_id += count
        state.producer_id_blocks[int(op["node"])] = (str(op["nonce"]), first, count)
        return {"error_code": E.NONE, "first": first, "count": count}
    return {"error_code": E.UNKNOWN_SERVER_ERROR, "error": f"unknown metadata op {op.get('op')!r}"}


def _create_topic(state: MetadataState, op: dict[str, Any]) -> dict[str, Any]:
    name, n, rf = op["name"], int(op["partitions"]), int(op["replication_factor"])
    if name in state.topics:
        return {"error_code": E.TOPIC_ALREADY_EXISTS, "error": f"topic {name!r} already exists"}
    reason = validate_topic_name(name)
    if reason:
        return {"error_code": E.INVALID_TOPIC_EXCEPTION, "error": reason}
    if n < 1:
        return {"error_code": E.INVALID_PARTITIONS, "error": f"partitions must be >= 1, got {n}"}
    nodes = sorted(state.node_ids)
    if not 1 <= rf <= len(nodes):
        return {"error_code": E.INVALID_REPLICATION_FACTOR,
                "error": f"replication factor must be in [1, {len(nodes)}], got {rf}"}
    parts = []
    for p in range(n):
        start = state.next_replica_start + p
        replicas = tuple(nodes[(start + i) % len(nodes)] for i in range(rf))
        info = PartitionInfo(topic=name, partition=p, group_id=state.next_group, replicas=replicas)
        state.groups[info.group_id] = info
        state.next_group += 1
        parts.append(info)
    state.next_replica_start = (state.next_replica_start + 1) % len(nodes)
    state.topics[name] = TopicInfo(name=name, topic_id=uuid.uuid5(_TOPIC_NS, name), partitions=tuple(parts))
    return {"error_code": E.NONE, "groups": [p.group_id for p in parts]}

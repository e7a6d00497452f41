"""Committed consumer-group offsets: the replicated state of a `__consumer_offsets` partition.

Pure data rebuilt by every replica, applied in log order: OffsetCommit records, group
metadata records (`groups.GroupRecord`) and the COMMIT/ABORT markers of transactions. A
TxnOffsetCommit record (one carrying a producer id) stays pending until its transaction's
marker: COMMIT makes it the committed offset, ABORT drops it. So offsets committed inside a
transaction become visible exactly when the transaction's output does.

Each record remembers where it sits in the log (`log_offset`): when a transaction commits,
its pending offset replaces the committed one only if it was written later (as Kafka does),
so a plain OffsetCommit written after the TxnOffsetCommit is not overwritten by the marker.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from logquake.broker.kerrors import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from logquake.broker.groups import GroupRecord

__all__ = [
    "OffsetKey",
    "CommittedOffset",
    "OffsetCommitRecord",
    "OffsetsState",
    "EMPTY",
    "apply_commit",
    "apply_marker",
    "apply_group",
    "fetch",
]

NO_PRODUCER_ID = -1


class OffsetKey(NamedTuple):
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, kw_only=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_ms: int = 0
    log_offset: int = -1  # where its record sits in __consumer_offsets


@dataclass(frozen=True, kw_only=True)
class OffsetCommitRecord:
    """One partition's offset, as OffsetCommit (producer_id -1) or TxnOffsetCommit writes it."""

    key: OffsetKey
    value: CommittedOffset
    producer_id: int = NO_PRODUCER_ID


@dataclass(frozen=True, kw_only=True)
class OffsetsState:
    committed: Mapping[OffsetKey, CommittedOffset] = field(default_factory=lambda: MappingProxyType({}))
    pending: Mapping[int, Mapping[OffsetKey, CommittedOffset]] = field(
        default_factory=lambda: MappingProxyType({}))
    groups: Mapping[str, GroupRecord] = field(default_factory=lambda: MappingProxyType({}))


EMPTY = OffsetsState()


def _put(mapping: Mapping, key: object, value: object) -> Mapping:
    copy = dict(mapping)
    copy[key] = value
    return MappingProxyType(copy)


def apply_commit(state: OffsetsState, record: OffsetCommitRecord, *, log_offset: int) -> OffsetsState:
    """The state after an offset record at `log_offset` was appended."""
    value = replace(record.value, log_offset=log_offset)
    if record.producer_id == NO_PRODUCER_ID:
        return replace(state, committed=_put(state.committed, record.key, value))
    mine = _put(state.pending.get(record.producer_id, {}), record.key, value)
    return replace(state, pending=_put(state.pending, record.producer_id, mine))


def apply_marker(state: OffsetsState, *, producer_id: int, commit: bool) -> OffsetsState:
    """The state after a transaction marker for `producer_id` was appended."""
    mine = state.pending.get(producer_id)
    if mine is None:
        return state
    pending = MappingProxyType({pid: offs for pid, offs in state.pending.items() if pid != producer_id})
    if not commit:
        return replace(state, pending=pending)
    committed = dict(state.committed)
    for key, value in mine.items():
        current = committed.get(key)
        if current is None or current.log_offset < value.log_offset:
            committed[key] = value
    return replace(state, committed=MappingProxyType(committed), pending=pending)


def apply_group(state: OffsetsState, record: GroupRecord) -> OffsetsState:
    """The state after a group metadata record was appended."""
    return replace(state, groups=_put(state.groups, record.group_id, record))


def fetch(state: OffsetsState, key: OffsetKey, *, require_stable: bool = False) -> tuple[CommittedOffset | None,
                                                                                          ErrorCode]:
    """OffsetFetch of one partition; with require_stable, a pending transactional offset is an error."""
    if require_stable and any(key in offs for offs in state.pending.values()):
        return None, ErrorCode.UNSTABLE_OFFSET_COMMIT
    return state.committed.get(key), ErrorCode.NONE

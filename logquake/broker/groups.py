"""The classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), sans-I/O.

One `Group` per group id lives on the leader of the group's `__consumer_offsets` partition.
It holds no sockets, timers or clocks: every call takes `now_ms`, and `tick(now_ms)` expires
sessions and ends join barriers. JoinGroup and SyncGroup are barriers, so a call may answer
requests other than its own: each call returns the replies to deliver, keyed by member id;
the handler parks a member's request until a reply for that member comes back.

A rebalance, as in Kafka's GroupCoordinator:
  Empty|Stable|CompletingRebalance --join/leave/expiry--> PreparingRebalance
  PreparingRebalance --every member rejoined, or rebalance timeout--> CompletingRebalance
      (generation + 1, a protocol all members support, a leader; members that did not
       rejoin are dropped; with no member left: Empty)
  CompletingRebalance --the leader's SyncGroup with the assignments--> Stable
A new group waits `initial_rebalance_delay_ms` so members starting together form one
generation. Members parked in a barrier are not expired (their request is the heartbeat).

States change only through `_transition`, checked against `VALID_PREVIOUS`: an illegal
transition is our bug and raises `IllegalGroupTransition` before changing anything. A client's
misuse is an error code: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, ...

Group membership is replicated only as a `GroupRecord` written when a generation becomes
Stable (Kafka's group metadata record), so a new coordinator resumes the generation and its
members (`Group.restore`) and generations only ever grow.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING

from logquake.broker.kerrors import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "GroupState",
    "VALID_PREVIOUS",
    "IllegalGroupTransition",
    "GroupConfig",
    "JoinReply",
    "SyncReply",
    "MemberRecord",
    "GroupRecord",
    "Group",
]

E = ErrorCode


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


G = GroupState
VALID_PREVIOUS: Mapping[GroupState, frozenset[GroupState]] = MappingProxyType({
    G.PREPARING_REBALANCE: frozenset({G.EMPTY, G.STABLE, G.COMPLETING_REBALANCE}),
    G.COMPLETING_REBALANCE: frozenset({G.PREPARING_REBALANCE}),
    G.STABLE: frozenset({G.COMPLETING_REBALANCE}),
    G.EMPTY: frozenset({G.PREPARING_REBALANCE}),
})


class IllegalGroupTransition(RuntimeError):
    """The coordinator tried a group state change the table forbids: a logquake bug."""


@dataclass(frozen=True, kw_only=True)
class GroupConfig:
    """Broker-side group settings (Kafka's group.* configs, with Kafka's defaults)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000


@dataclass(frozen=True, kw_only=True)
class JoinReply:
    member_id: str
    error: ErrorCode = E.NONE
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # for the leader only: (member id, metadata)


@dataclass(frozen=True, kw_only=True)
class SyncReply:
    member_id: str
    error: ErrorCode = E.NONE
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


Reply = JoinReply | SyncReply


@dataclass(frozen=True, kw_only=True)
class MemberRecord:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    metadata: bytes  # the subscription, for the chosen protocol
    assignment: bytes


@dataclass(frozen=True, kw_only=True)
class GroupRecord:
    """The replicated summary of a group's current generation."""

    group_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: tuple[MemberRecord, ...] = ()


@dataclass(kw_only=True)
class _Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    deadline_ms: int = 0
    awaiting_join: bool = False
    awaiting_sync: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")


@dataclass(kw_only=True)
class Group:
    """One consumer group's membership state machine (mutable, deterministic, no I/O)."""

    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: dict[str, _Member] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    not_before_ms: int = 0  # the initial rebalance delay of a new group

    # -- requests -------------------------------------------------------------------------

    def join(
        self, *, member_id: str, new_member_id: str, client_id: str = "", client_host: str = "",
        session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: Iterable[tuple[str, bytes]], now_ms: int,
    ) -> list[Reply]:
        """JoinGroup; `new_member_id` is the id given to a member joining with an empty one."""
        protocols = tuple(protocols)
        error = self._join_error(member_id, session_timeout_ms, protocol_type, protocols)
        if error:
            return [JoinReply(member_id=member_id, error=error)]
        member = self.members.get(member_id)
        if member is None:
            member = _Member(member_id=new_member_id, client_id=client_id, client_host=client_host,
                             session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                             protocols=protocols)
            self.members[member.member_id] = member
            self.protocol_type = protocol_type
        elif self._unchanged_rejoin(member, protocols):
            member.deadline_ms = now_ms + member.session_timeout_ms
            return [self._join_reply(member)]
        member.protocols = protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        member.awaiting_join = True
        member.deadline_ms = now_ms + member.session_timeout_ms
        replies = self._prepare_rebalance(now_ms) if self.state is not G.PREPARING_REBALANCE else []
        return replies + self._maybe_complete_join(now_ms)

    def sync(self, *, member_id: str, generation: int, assignments: Mapping[str, bytes] | None,
             now_ms: int) -> list[Reply]:
        """SyncGroup; the leader's call carries every member's assignment."""
        error = self._member_error(member_id, generation)
        if error or self.state is G.PREPARING_REBALANCE:
            return [SyncReply(member_id=member_id, error=error or E.REBALANCE_IN_PROGRESS)]
        member = self.members[member_id]
        member.deadline_ms = now_ms + member.session_timeout_ms
        if self.state is G.STABLE:
            return [self._sync_reply(member)]
        member.awaiting_sync = True
        if member_id != self.leader_id:
            return []
        for m in self.members.values():
            m.assignment = (assignments or {}).get(m.member_id, b"")
        self._transition(G.STABLE)
        replies = [self._sync_reply(m) for m in self.members.values() if m.awaiting_sync]
        for m in self.members.values():
            m.awaiting_sync = False
        return replies

    def heartbeat(self, *, member_id: str, generation: int, now_ms: int) -> ErrorCode:
        """Heartbeat: keeps the session alive, and says when to rejoin."""
        error = self._member_error(member_id, generation)
        if error:
            return error
        member = self.members[member_id]
        member.deadline_ms = now_ms + member.session_timeout_ms
        return E.REBALANCE_IN_PROGRESS if self.state is G.PREPARING_REBALANCE else E.NONE

    def leave(self, *, member_ids: Iterable[str], now_ms: int) -> tuple[dict[str, ErrorCode], list[Reply]]:
        """LeaveGroup for one member (v0-2) or several (v3+): per-member errors, and barrier replies."""
        errors: dict[str, ErrorCode] = {}
        replies: list[Reply] = []
        for member_id in member_ids:
            errors[member_id] = E.NONE if member_id in self.members else E.UNKNOWN_MEMBER_ID
            if member_id in self.members:
                replies += self._remove(member_id, now_ms)
        return errors, replies

    def check_offset_commit(self, *, member_id: str, generation: int, now_ms: int) -> ErrorCode:
        """May this OffsetCommit be written? (As Kafka: allowed while preparing a rebalance.)"""
        if generation < 0 and not member_id and self.state is G.EMPTY:
            return E.NONE  # a consumer using assign(): no membership, group unused
        if self.state is G.COMPLETING_REBALANCE and member_id in self.members:
            return E.REBALANCE_IN_PROGRESS
        error = self._member_error(member_id, generation)
        if not error:
            member = self.members[member_id]
            member.deadline_ms = now_ms + member.session_timeout_ms
        return error

    def tick(self, *, now_ms: int) -> list[Reply]:
        """Expire sessions and end a join barrier whose time is up."""
        replies: list[Reply] = []
        for member in list(self.members.values()):
            if member.member_id not in self.members:
                continue  # dropped by the barrier an earlier removal completed
            if member.deadline_ms < now_ms and not (member.awaiting_join or member.awaiting_sync):
                replies += self._remove(member.member_id, now_ms)
        return replies + self._maybe_complete_join(now_ms)

    # -- replication ----------------------------------------------------------------------

    def snapshot(self) -> GroupRecord:
        """The record to replicate when a generation becomes Stable (or Empty)."""
        members = tuple(
            MemberRecord(member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                         session_timeout_ms=m.session_timeout_ms, rebalance_timeout_ms=m.rebalance_timeout_ms,
                         metadata=m.metadata(self.protocol_name), assignment=m.assignment)
            for m in self.members.values()
        )
        return GroupRecord(group_id=self.group_id, generation=self.generation, protocol_type=self.protocol_type,
                           protocol_name=self.protocol_name, leader_id=self.leader_id, members=members)

    @classmethod
    def restore(cls, record: GroupRecord, *, now_ms: int, config: GroupConfig | None = None) -> Group:
        """A new coordinator's group: the replicated generation, sessions restarted from now."""
        members = {
            m.member_id: _Member(member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                                 session_timeout_ms=m.session_timeout_ms,
                                 rebalance_timeout_ms=m.rebalance_timeout_ms,
                                 protocols=((record.protocol_name or "", m.metadata),), assignment=m.assignment,
                                 deadline_ms=now_ms + m.session_timeout_ms)
            for m in record.members
        }
        return cls(group_id=record.group_id, config=config or GroupConfig(),
                   state=G.STABLE if members else G.EMPTY, generation=record.generation,
                   protocol_type=record.protocol_type, protocol_name=record.protocol_name,
                   leader_id=record.leader_id if members else "", members=members)

    # -- internals ------------------------------------------------------------------------

    def _transition(self, state: GroupState) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalGroupTransition(f"group {self.group_id!r}: {self.state.value} -> {state.value}")
        self.state = state

    def _join_error(self, member_id: str, session_timeout_ms: int, protocol_type: str,
                    protocols: tuple[tuple[str, bytes], ...]) -> ErrorCode:
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return E.INVALID_SESSION_TIMEOUT
        if member_id and member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        if not protocols or not protocol_type:
            return E.INCONSISTENT_GROUP_PROTOCOL
        others = [m for m in self.members.values() if m.member_id != member_id]
        if others and (protocol_type != self.protocol_type or not self._common_protocols(others, protocols)):
            return E.INCONSISTENT_GROUP_PROTOCOL
        return E.NONE

    @staticmethod
    def _common_protocols(members: Iterable[_Member], protocols: tuple[tuple[str, bytes], ...]) -> list[str]:
        names = [name for name, _ in protocols]
        for m in members:
            theirs = {name for name, _ in m.protocols}
            names = [n for n in names if n in theirs]
        return names

    def _unchanged_rejoin(self, member: _Member, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        # Kafka answers such a rejoin with the current generation instead of rebalancing.
        if member.protocols != protocols:
            return False
        if self.state is G.STABLE:
            return member.member_id != self.leader_id
        return self.state is G.COMPLETING_REBALANCE

    def _member_error(self, member_id: str, generation: int) -> ErrorCode:
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def _prepare_rebalance(self, now_ms: int) -> list[Reply]:
        replies: list[Reply] = []
        if self.state is G.COMPLETING_REBALANCE:  # parked syncs are answered: rejoin
            for m in self.members.values():
                if m.awaiting_sync:
                    replies.append(SyncReply(member_id=m.member_id, error=E.REBALANCE_IN_PROGRESS))
                    m.awaiting_sync = False
        if self.state is G.EMPTY:
            self.not_before_ms = now_ms + self.config.initial_rebalance_delay_ms
        self._transition(G.PREPARING_REBALANCE)
        longest = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + longest
        return replies

    def _maybe_complete_join(self, now_ms: int) -> list[Reply]:
        if self.state is not G.PREPARING_REBALANCE:
            return []
        everyone = all(m.awaiting_join for m in self.members.values())
        if not ((everyone and now_ms >= self.not_before_ms) or now_ms >= self.rebalance_deadline_ms):
            return []
        for member in [m for m in self.members.values() if not m.awaiting_join]:
            del self.members[member.member_id]  # did not rejoin in time
        self.generation += 1
        if not self.members:
            self._transition(G.EMPTY)
            self.protocol_type = self.protocol_name = None
            self.leader_id = ""
            return []
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._transition(G.COMPLETING_REBALANCE)
        for m in self.members.values():
            m.awaiting_join = False
            m.deadline_ms = now_ms + m.session_timeout_ms
        return [self._join_reply(m) for m in self.members.values()]

    def _select_protocol(self) -> str:
        # Kafka: among protocols every member supports, each member votes for its favourite.
        members = list(self.members.values())
        candidates = self._common_protocols(members[1:], members[0].protocols)
        votes = Counter(next(n for n, _ in m.protocols if n in candidates) for m in members)
        return max(candidates, key=lambda n: (votes[n], -candidates.index(n)))

    def _remove(self, member_id: str, now_ms: int) -> list[Reply]:
        member = self.members.pop(member_id)
        replies: list[Reply] = []
        if member.awaiting_join:
            replies.append(JoinReply(member_id=member_id, error=E.UNKNOWN_MEMBER_ID))
        if member.awaiting_sync:
            replies.append(SyncReply(member_id=member_id, error=E.UNKNOWN_MEMBER_ID))
        if self.state in (G.STABLE, G.COMPLETING_REBALANCE):
            replies += self._prepare_rebalance(now_ms)
        return replies + self._maybe_complete_join(now_ms)

    def _join_reply(self, member: _Member) -> JoinReply:
        is_leader = member.member_id == self.leader_id
        members = tuple((m.member_id, m.metadata(self.protocol_name)) for m in self.members.values())
        return JoinReply(member_id=member.member_id, generation=self.generation, protocol_type=self.protocol_type,
                         protocol_name=self.protocol_name, leader_id=self.leader_id,
                         members=members if is_leader else ())

    def _sync_reply(self, member: _Member) -> SyncReply:
        return SyncReply(member_id=member.member_id, assignment=member.assignment,
                         protocol_type=self.protocol_type, protocol_name=self.protocol_name)

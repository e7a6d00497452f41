"""The consumer-group coordinator and committed offsets: transcripts, then a Hypothesis model
of clients joining, syncing, heartbeating, leaving and dying against one coordinator."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logquake.broker import group_offsets as go
from logquake.broker.groups import (
    Group,
    GroupConfig,
    GroupState,
    IllegalGroupTransition,
    JoinReply,
    SyncReply,
)
from logquake.broker.kerrors import ErrorCode

E = ErrorCode
NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)
RANGE = [("range", b"sub-topic-x")]


def join(g: Group, member: str, now: int, *, new: str | None = None, protocols=RANGE, session: int = 10_000,
         rebalance: int = 30_000, ptype: str = "consumer") -> list:
    return g.join(member_id=member, new_member_id=new or member, client_id="c", session_timeout_ms=session,
                  rebalance_timeout_ms=rebalance, protocol_type=ptype, protocols=protocols, now_ms=now)


def by_member(replies: list) -> dict:
    return {r.member_id: r for r in replies}


def test_transcript_join_sync_rebalance() -> None:
    g = Group(group_id="g", config=NO_DELAY)
    (r,) = join(g, "", 0, new="a")
    assert (r.member_id, r.error, r.generation, r.leader_id, r.members) == ("a", E.NONE, 1, "a", (("a", b"sub-topic-x"),))
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.heartbeat(member_id="a", generation=1, now_ms=1) is E.NONE
    assert g.sync(member_id="a", generation=1, assignments={"a": b"A1"}, now_ms=2) == [
        SyncReply(member_id="a", assignment=b"A1", protocol_type="consumer", protocol_name="range")]
    assert g.state is GroupState.STABLE
    assert join(g, "", 3, new="b") == []  # parked: a must rejoin
    assert g.heartbeat(member_id="a", generation=1, now_ms=4) is E.REBALANCE_IN_PROGRESS
    replies = by_member(join(g, "a", 5))
    assert set(replies) == {"a", "b"} and {r.generation for r in replies.values()} == {2}
    assert [m for m, _ in replies["a"].members] == ["a", "b"] and replies["b"].members == ()
    assert g.sync(member_id="b", generation=2, assignments=None, now_ms=6) == []  # waits for the leader
    assert g.heartbeat(member_id="b", generation=1, now_ms=6) is E.ILLEGAL_GENERATION
    assert g.heartbeat(member_id="zz", generation=2, now_ms=6) is E.UNKNOWN_MEMBER_ID
    done = by_member(g.sync(member_id="a", generation=2, assignments={"a": b"A2", "b": b"B2"}, now_ms=7))
    assert (done["a"].assignment, done["b"].assignment) == (b"A2", b"B2")
    assert g.sync(member_id="b", generation=2, assignments=None, now_ms=8)[0].assignment == b"B2"
    assert g.sync(member_id="b", generation=1, assignments=None, now_ms=8)[0].error is E.ILLEGAL_GENERATION


def stable_pair() -> Group:
    g = Group(group_id="g", config=NO_DELAY)
    join(g, "", 0, new="a")
    g.sync(member_id="a", generation=1, assignments={}, now_ms=0)
    join(g, "", 0, new="b")
    join(g, "a", 0)
    g.sync(member_id="a", generation=2, assignments={"a": b"A", "b": b"B"}, now_ms=0)
    assert g.state is GroupState.STABLE and g.generation == 2
    return g


def test_session_expiry_rebalances_without_the_dead_member() -> None:
    g = stable_pair()
    assert g.tick(now_ms=9_000) == []
    g.heartbeat(member_id="a", generation=2, now_ms=9_000)
    assert g.tick(now_ms=10_001) == []  # b expired; a must rejoin
    assert "b" not in g.members and g.state is GroupState.PREPARING_REBALANCE
    (r,) = join(g, "a", 10_002)
    assert (r.generation, r.members) == (3, (("a", b"sub-topic-x"),))


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    g = stable_pair()
    assert join(g, "", 1_000, new="c") == []
    assert join(g, "a", 1_001) == []
    for t in range(2_000, 31_000, 2_000):  # b heartbeats, but never rejoins
        assert g.heartbeat(member_id="b", generation=2, now_ms=t) is E.REBALANCE_IN_PROGRESS
        assert g.tick(now_ms=t) == []
    replies = by_member(g.tick(now_ms=31_001))
    assert set(replies) == {"a", "c"} and g.generation == 3 and "b" not in g.members


def test_unchanged_rejoin_of_a_follower_does_not_rebalance() -> None:
    g = stable_pair()
    (r,) = join(g, "b", 1)
    assert (r.generation, g.state) == (2, GroupState.STABLE)
    assert join(g, "a", 2) == []  # the leader rejoining does (it may have new subscriptions to assign)
    assert g.state is GroupState.PREPARING_REBALANCE


def test_leave_and_empty_group() -> None:
    g = stable_pair()
    errors, replies = g.leave(member_ids=["a", "nobody"], now_ms=5)
    assert errors == {"a": E.NONE, "nobody": E.UNKNOWN_MEMBER_ID} and replies == []
    (r,) = join(g, "b", 6)
    assert (r.generation, r.leader_id) == (3, "b")  # leadership moved
    g.sync(member_id="b", generation=3, assignments={}, now_ms=7)
    g.leave(member_ids=["b"], now_ms=8)
    assert (g.state, g.generation, g.members) == (GroupState.EMPTY, 4, {})


def test_leave_answers_a_parked_sync() -> None:
    g = stable_pair()
    join(g, "", 1, new="c")
    join(g, "a", 1)
    replies = join(g, "b", 1)
    assert {r.generation for r in replies} == {3}
    assert g.sync(member_id="c", generation=3, assignments=None, now_ms=2) == []
    _, replies = g.leave(member_ids=["a"], now_ms=3)  # the leader leaves before syncing
    assert SyncReply(member_id="c", error=E.REBALANCE_IN_PROGRESS) in replies


def test_join_errors() -> None:
    g = stable_pair()
    assert join(g, "", 0, new="x", session=1)[0].error is E.INVALID_SESSION_TIMEOUT
    assert join(g, "ghost", 0)[0].error is E.UNKNOWN_MEMBER_ID
    assert join(g, "", 0, new="x", protocols=[("roundrobin", b"")])[0].error is E.INCONSISTENT_GROUP_PROTOCOL
    assert join(g, "", 0, new="x", ptype="connect")[0].error is E.INCONSISTENT_GROUP_PROTOCOL
    assert "x" not in g.members and g.state is GroupState.STABLE


def test_protocol_chosen_by_votes_among_common_ones() -> None:
    g = Group(group_id="g", config=NO_DELAY)
    assert join(g, "", 0, new="a", protocols=[("coop", b"1"), ("range", b"2")], session=10_000) != []
    g.sync(member_id="a", generation=1, assignments={}, now_ms=0)
    join(g, "", 0, new="b", protocols=[("range", b"3"), ("coop", b"4")])
    join(g, "", 0, new="c", protocols=[("range", b"5"), ("sticky", b"")])
    replies = by_member(join(g, "a", 0, protocols=[("coop", b"1"), ("range", b"2")]))
    assert replies["a"].protocol_name == "range"
    assert dict(replies["a"].members) == {"a": b"2", "b": b"3", "c": b"5"}


def test_initial_rebalance_delay_gathers_members_starting_together() -> None:
    g = Group(group_id="g")
    assert join(g, "", 0, new="a") == []
    assert join(g, "", 100, new="b") == []
    assert g.tick(now_ms=2_999) == []
    replies = by_member(g.tick(now_ms=3_000))
    assert set(replies) == {"a", "b"} and g.generation == 1


def test_offset_commit_checks() -> None:
    g = Group(group_id="g", config=NO_DELAY)
    assert g.check_offset_commit(member_id="", generation=-1, now_ms=0) is E.NONE  # assign() user
    join(g, "", 0, new="a")
    assert g.check_offset_commit(member_id="a", generation=1, now_ms=0) is E.REBALANCE_IN_PROGRESS
    g.sync(member_id="a", generation=1, assignments={}, now_ms=0)
    assert g.check_offset_commit(member_id="a", generation=1, now_ms=0) is E.NONE
    assert g.check_offset_commit(member_id="a", generation=0, now_ms=0) is E.ILLEGAL_GENERATION
    assert g.check_offset_commit(member_id="", generation=-1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    join(g, "", 0, new="b")
    assert g.check_offset_commit(member_id="a", generation=1, now_ms=0) is E.NONE  # commit before rejoining


def test_snapshot_restore_keeps_generation_and_members() -> None:
    g = stable_pair()
    record = g.snapshot()
    state = go.apply_group(go.EMPTY, record)
    h = Group.restore(state.groups["g"], now_ms=100, config=NO_DELAY)
    assert (h.state, h.generation, h.leader_id) == (GroupState.STABLE, 2, "a")
    assert h.heartbeat(member_id="b", generation=2, now_ms=101) is E.NONE
    assert h.sync(member_id="b", generation=2, assignments=None, now_ms=101)[0].assignment == b"B"
    (r,) = join(h, "b", 102, protocols=[("range", b"sub-topic-x")])
    assert r.generation == 2
    assert h.snapshot() == record


def test_illegal_transition_raises_and_changes_nothing() -> None:
    g = Group(group_id="g")
    with pytest.raises(IllegalGroupTransition, match="Empty -> Stable"):
        g._transition(GroupState.STABLE)
    assert g.state is GroupState.EMPTY


def test_offsets_plain_and_transactional() -> None:
    k = go.OffsetKey("g", "t", 0)
    s = go.apply_commit(go.EMPTY, go.OffsetCommitRecord(key=k, value=go.CommittedOffset(offset=5)), log_offset=0)
    assert go.fetch(s, k)[0].offset == 5
    s = go.apply_commit(s, go.OffsetCommitRecord(key=k, value=go.CommittedOffset(offset=9), producer_id=7),
                        log_offset=1)
    assert go.fetch(s, k)[0].offset == 5  # pending until the COMMIT marker
    assert go.fetch(s, k, require_stable=True) == (None, E.UNSTABLE_OFFSET_COMMIT)
    aborted = go.apply_marker(s, producer_id=7, commit=False)
    assert go.fetch(aborted, k, require_stable=True)[0].offset == 5
    committed = go.apply_marker(s, producer_id=7, commit=True)
    assert go.fetch(committed, k, require_stable=True)[0].offset == 9
    assert go.fetch(committed, go.OffsetKey("g", "t", 1)) == (None, E.NONE)
    # a plain commit written after the transactional one wins when the marker lands
    later = go.apply_commit(s, go.OffsetCommitRecord(key=k, value=go.CommittedOffset(offset=11)), log_offset=2)
    assert go.fetch(go.apply_marker(later, producer_id=7, commit=True), k)[0].offset == 11
    assert go.apply_marker(go.EMPTY, producer_id=3, commit=True) == go.EMPTY


class GroupClients(RuleBasedStateMachine):
    """Clients follow the protocol (one join/sync in flight each), but join, leave, stall and
    die at random while time passes; the coordinator must keep the group coherent."""

    def __init__(self) -> None:
        super().__init__()
        self.g = Group(group_id="g", config=GroupConfig(initial_rebalance_delay_ms=500))
        self.now = 0
        self.next_id = 0
        self.clients: dict[str, dict] = {}  # member id -> {"parked": None|"join"|"sync", "gen", "leader"}
        self.generations: list[int] = []
        self.assigned_by: dict[int, dict[str, bytes]] = {}  # generation -> assignments its leader sent

    def _deliver(self, replies: list) -> None:
        for r in replies:
            client = self.clients.get(r.member_id)
            kind = "join" if isinstance(r, JoinReply) else "sync"
            assert client is not None and client["parked"] == kind, f"unexpected {kind} reply {r}"
            client["parked"] = None
            if r.error is not E.NONE:
                if r.error is E.UNKNOWN_MEMBER_ID:
                    del self.clients[r.member_id]
                continue
            if kind == "join":
                assert r.generation == self.g.generation
                client["gen"], client["leader"] = r.generation, r.leader_id == r.member_id
                client["members"] = [m for m, _ in r.members]
            else:
                assert r.assignment == self.assigned_by[client["gen"]].get(r.member_id, b"")

    def _request(self, member_id: str, kind: str, fn) -> None:
        self.clients[member_id]["parked"] = kind
        self._deliver(fn())

    def _idle(self) -> list[str]:
        return sorted(m for m, c in self.clients.items() if c["parked"] is None)

    @rule()
    def new_member_joins(self) -> None:
        self.next_id += 1
        mid = f"m{self.next_id}"
        self.clients[mid] = {"parked": None, "gen": -1, "leader": False}
        self._request(mid, "join", lambda: join(self.g, "", self.now, new=mid))

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def member_rejoins(self, data) -> None:
        mid = data.draw(st.sampled_from(self._idle()))
        self._request(mid, "join", lambda: join(self.g, mid, self.now))

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def member_syncs(self, data) -> None:
        mid = data.draw(st.sampled_from(self._idle()))
        client = self.clients[mid]
        assignments = None
        if client["leader"]:
            assignments = {m: f"{m}@{client['gen']}".encode() for m in client.get("members", [])}
            if client["gen"] == self.g.generation and self.g.state is GroupState.COMPLETING_REBALANCE:
                self.assigned_by[client["gen"]] = assignments
        self._request(mid, "sync", lambda: self.g.sync(member_id=mid, generation=client["gen"],
                                                       assignments=assignments, now_ms=self.now))

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def member_heartbeats(self, data) -> None:
        mid = data.draw(st.sampled_from(self._idle()))
        error = self.g.heartbeat(member_id=mid, generation=self.clients[mid]["gen"], now_ms=self.now)
        if error is E.UNKNOWN_MEMBER_ID:
            del self.clients[mid]

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def member_leaves(self, data) -> None:
        mid = data.draw(st.sampled_from(self._idle()))
        del self.clients[mid]
        _, replies = self.g.leave(member_ids=[mid], now_ms=self.now)
        self._deliver(replies)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def member_dies_silently(self, data) -> None:
        mid = data.draw(st.sampled_from(sorted(self.clients)))
        self.clients[mid]["dead"] = True  # replies to it are still delivered, it just never calls again

    @rule(ms=st.integers(0, 40_000))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self._deliver(self.g.tick(now_ms=self.now))

    @invariant()
    def generations_only_grow(self) -> None:
        self.generations.append(self.g.generation)
        assert self.generations == sorted(self.generations)

    @invariant()
    def barriers_hold_only_in_their_state(self) -> None:
        for m in self.g.members.values():
            assert not m.awaiting_join or self.g.state is GroupState.PREPARING_REBALANCE
            assert not m.awaiting_sync or self.g.state is GroupState.COMPLETING_REBALANCE
        for mid, c in self.clients.items():
            if c["parked"] is not None:
                assert mid in self.g.members, f"{mid} waits for a reply that will never come"

    @invariant()
    def a_leader_among_members(self) -> None:
        if self.g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert self.g.leader_id in self.g.members
        if self.g.state is GroupState.EMPTY:
            assert not self.g.members

    def teardown(self) -> None:
        # Liveness: once the dead are expired and the living keep answering, the group settles.
        for _ in range(12):
            self.now += 5_000
            for mid in self._idle():
                c = self.clients[mid]
                if c.get("dead"):
                    continue
                if self.g.state is GroupState.PREPARING_REBALANCE or c["gen"] != self.g.generation:
                    self._request(mid, "join", lambda mid=mid: join(self.g, mid, self.now))
                elif self.g.state is GroupState.COMPLETING_REBALANCE and c["leader"]:
                    self.member_syncs_settle(mid)
                elif self.g.heartbeat(member_id=mid, generation=c["gen"], now_ms=self.now) is E.UNKNOWN_MEMBER_ID:
                    del self.clients[mid]  # a real client would join again as a new member
            self._deliver(self.g.tick(now_ms=self.now))
        living = {m for m, c in self.clients.items() if not c.get("dead")}
        if living:
            assert self.g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
            assert set(self.g.members) == living

    def member_syncs_settle(self, mid: str) -> None:
        c = self.clients[mid]
        assignments = {m: f"{m}@{c['gen']}".encode() for m in c.get("members", [])}
        self.assigned_by[c["gen"]] = assignments
        self._request(mid, "sync", lambda: self.g.sync(member_id=mid, generation=c["gen"],
                                                       assignments=assignments, now_ms=self.now))


TestGroupClients = GroupClients.TestCase
TestGroupClients.settings = settings(max_examples=50, stateful_step_count=25, deadline=None)

"""Scripted tests of the Raft rules (the paper's sections in the names), as message transcripts."""

from __future__ import annotations

import random

import pytest

from logquake.broker.raft import (
    CANDIDATE,
    EARLY_KINDS,
    FOLLOWER,
    LEADER,
    Entry,
    HardState,
    Message,
    MsgKind,
    RaftConfig,
    RaftNode,
)
from logquake.broker.raftsim import Sim


def node(i: int = 1, voters=(1, 2, 3), cfg: RaftConfig | None = None, **kw) -> RaftNode:  # noqa: ANN001
    return RaftNode(group="g", node_id=i, voters=voters, config=cfg, rng=random.Random(i), **kw)


def log(*terms: int) -> list[Entry]:
    """A log whose entry i+1 has term terms[i] (payload names its place)."""
    return [Entry(t, i + 1, f"{i + 1}@{t}".encode()) for i, t in enumerate(terms)]


def drain(r: RaftNode) -> list[Message]:
    """Persist-and-advance like a shell that always succeeds; return the messages."""
    msgs: list[Message] = []
    while r.has_ready():
        rd = r.ready()
        msgs.extend(rd.messages)
        r.advance(rd)
    return msgs


def elect(sim: Sim, i: int = 1) -> None:
    sim.raft(i).campaign()
    sim.stabilize()
    assert sim.leader() == i


# ---- elections (§5.2) ---------------------------------------------------------------------------


def test_election_transcript_prevote_vote_noop() -> None:
    sim = Sim(n=3)
    sim.trace = []
    elect(sim, 1)
    assert sim.trace == [
        "1->2 PREVOTE t1 last=0@0",
        "1->3 PREVOTE t1 last=0@0",
        "2->1 PREVOTE_RESP t1",
        "3->1 PREVOTE_RESP t1",
        "1->2 VOTE t1 last=0@0",
        "1->3 VOTE t1 last=0@0",
        "2->1 VOTE_RESP t1",
        "3->1 VOTE_RESP t1",
        "1->2 APPEND t1 prev=0@0 [1@1] commit=0",
        "1->3 APPEND t1 prev=0@0 [1@1] commit=0",
        "2->1 APPEND_RESP t1 index=1",
        "3->1 APPEND_RESP t1 index=1",
    ]
    assert [sim.raft(i).role for i in (1, 2, 3)] == [LEADER, FOLLOWER, FOLLOWER]
    assert sim.raft(1).commit_index == 1  # the no-op of term 1
    assert sim.raft(1).entry(1) == Entry(1, 1, b"")
    sim.run(2)  # a heartbeat carries the commit index to followers
    assert [sim.raft(i).commit_index for i in (1, 2, 3)] == [1, 1, 1]
    assert [sim.raft(i).leader_id for i in (1, 2, 3)] == [1, 1, 1]


@pytest.mark.parametrize("eager", [False, True])
def test_commit_heartbeats_tell_followers_of_a_commit_without_waiting_for_a_tick(eager: bool) -> None:
    sim = Sim(n=3, config=RaftConfig(commit_heartbeats=eager))
    elect(sim, 1)
    sim.propose(b"create topic")
    sim.stabilize()  # delivers everything queued; no tick, so no periodic heartbeat
    assert sim.raft(1).commit_index == 2
    followers = [sim.raft(i).commit_index for i in (2, 3)]
    # Otherwise they know only what the last append carried: the no-op's commit, not 2.
    assert followers == ([2, 2] if eager else [1, 1])
    sim.trace = []
    sim.stabilize()
    assert sim.trace == []  # and nothing more: heartbeats went out once per advance, not per turn


def test_followers_elect_someone_by_timeout_alone() -> None:
    sim = Sim(n=5, seed=7)
    assert sim.run_until(lambda: sim.leader() is not None, 200)
    assert len(sim.leaders()) == 1


def test_single_node_group_leads_itself_and_commits_after_persisting() -> None:
    r = node(1, voters=(1,))
    r.campaign()
    assert r.role == LEADER and r.term == 1
    rd = r.ready()
    assert rd.entries == (Entry(1, 1, b""),) and rd.committed == ()
    r.advance(rd)
    assert r.commit_index == 1
    assert r.ready().committed == (Entry(1, 1, b""),)


def test_vote_requires_up_to_date_log_5_4_1() -> None:
    r = node(1, entries=log(1, 2), hard_state=HardState(2, None, 0))

    def ask(frm: int, term: int, last_term: int, last_index: int) -> bool:
        r.step(Message(MsgKind.VOTE, "g", frm, 1, term, last_term, last_index))
        (resp,) = drain(r)
        assert resp.kind is MsgKind.VOTE_RESP
        return not resp.reject

    assert not ask(2, 3, 1, 9)  # older last term loses whatever its length
    assert not ask(2, 4, 2, 1)  # same last term, shorter log
    assert ask(2, 5, 2, 2)
    assert r.vote == 2 and r.term == 5


def test_unclean_election_grants_votes_to_stale_logs() -> None:
    r = node(1, cfg=RaftConfig(unclean_election=True), entries=log(1, 2), hard_state=HardState(2, None, 0))
    r.step(Message(MsgKind.VOTE, "g", 2, 1, 3, 1, 1))
    (resp,) = drain(r)
    assert not resp.reject


def test_one_vote_per_term_survives_restart() -> None:
    r = node(1)
    r.step(Message(MsgKind.VOTE, "g", 2, 1, 3, 0, 0))
    rd = r.ready()
    assert rd.hard_state == HardState(3, 2, 0)  # the vote is in the Ready, to persist before answering
    assert [(m.to, m.reject) for m in rd.messages] == [(2, False)]
    r.advance(rd)
    r.step(Message(MsgKind.VOTE, "g", 3, 1, 3, 0, 0))
    assert [m.reject for m in drain(r)] == [True]

    restarted = node(1, hard_state=rd.hard_state)  # crash, restart from what was persisted
    restarted.step(Message(MsgKind.VOTE, "g", 3, 1, 3, 0, 0))
    assert [m.reject for m in drain(restarted)] == [True]
    restarted.step(Message(MsgKind.VOTE, "g", 2, 1, 3, 0, 0))  # a retry by the same candidate is fine
    assert [m.reject for m in drain(restarted)] == [False]


def test_split_vote_candidate_retries_in_a_later_term() -> None:
    cfg = RaftConfig(pre_vote=False)
    sim = Sim(n=3, config=cfg)
    sim.partition([1], [2], [3])
    sim.raft(1).campaign()
    sim.raft(2).campaign()
    sim.stabilize()
    assert sim.raft(1).role == CANDIDATE and sim.raft(1).term == 1
    sim.heal()
    assert sim.run_until(lambda: sim.leader() is not None, 200)
    assert sim.raft(sim.leader()).term >= 2


# ---- replication and log matching (§5.3) --------------------------------------------------------


def test_proposals_replicate_and_commit_on_all() -> None:
    sim = Sim(n=3)
    elect(sim)
    assert sim.raft(2).propose(b"nope") is None  # followers do not accept proposals
    idx = [sim.propose(b"v%d" % k) for k in range(5)]
    assert idx == [2, 3, 4, 5, 6]
    sim.stabilize()
    sim.run(2)
    for i in (1, 2, 3):
        assert sim.raft(i).commit_index == 6
        assert [e.data for e in sim.nodes[i].applied] == [b"", b"v0", b"v1", b"v2", b"v3", b"v4"]


# Figure 7 of the paper: a leader of term 8 and followers (a)-(f) with missing and extra entries.
LEADER_LOG = (1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
FOLLOWERS = {
    "a": (1, 1, 1, 4, 4, 5, 5, 6, 6),
    "b": (1, 1, 1, 4),
    "c": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6),
    "d": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7),
    "e": (1, 1, 1, 4, 4, 4, 4),
    "f": (1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3),
}


@pytest.mark.parametrize("case", sorted(FOLLOWERS))
def test_figure7_follower_converges_with_fast_backtracking(case: str) -> None:
    sim = Sim(n=3)
    sim.trace = []
    sim.load(1, HardState(7, None, 0), log(*LEADER_LOG))
    sim.load(2, HardState(7, None, 0), log(*FOLLOWERS[case]))
    sim.load(3, HardState(7, None, 0), log(*LEADER_LOG))  # votes for 1 when 2's log is fresher (c, d)
    sim.raft(1).campaign()
    sim.stabilize()
    sim.run(3)  # a heartbeat or two: commit reaches the follower
    assert sim.leader() == 1 and sim.raft(1).term == 8
    want = sim.raft(1).entries_from(1)
    assert want[:10] == tuple(log(*LEADER_LOG)) and want[10] == Entry(8, 11, b"")
    assert sim.raft(2).entries_from(1) == want
    assert sim.raft(2).commit_index == 11
    rejects = [line for line in sim.trace if "APPEND_RESP" in line and "REJECT" in line]
    assert len(rejects) <= 2, rejects  # one hint skips a whole term, not one entry per round trip


def test_follower_rejects_append_with_mismatched_prev_and_hints() -> None:
    r = node(2, entries=log(1, 1, 2, 2, 2), hard_state=HardState(3, None, 0))
    r.step(Message(MsgKind.APPEND, "g", 1, 2, 3, log_term=3, index=5, entries=(Entry(3, 6, b"x"),)))
    (resp,) = drain(r)
    assert (resp.reject, resp.index, resp.reject_hint, resp.log_term) == (True, 5, 5, 2)
    r.step(Message(MsgKind.APPEND, "g", 1, 2, 3, log_term=1, index=9))
    (resp,) = drain(r)  # beyond our log: the hint is our last index whose term <= 1
    assert (resp.reject, resp.reject_hint, resp.log_term) == (True, 2, 1)
    assert r.last_index == 5


def test_conflicting_suffix_is_truncated_and_ready_says_from_where() -> None:
    r = node(2, entries=log(1, 1, 2, 2), hard_state=HardState(3, None, 2))
    r.step(
        Message(MsgKind.APPEND, "g", 1, 2, 3, log_term=1, index=2, entries=(Entry(3, 3, b"new"),), commit=3)
    )
    rd = r.ready()
    assert rd.entries == (Entry(3, 3, b"new"),)  # index 3 <= last persisted 4: storage truncates from 3
    assert rd.messages[0].index == 3 and not rd.messages[0].reject
    assert r.entries_from(1) == (*log(1, 1), Entry(3, 3, b"new"))
    assert r.commit_index == 3


# ---- commitment (§5.4.2, Figure 8) ---------------------------------------------------------------


def test_leader_commits_older_term_entries_only_through_its_own() -> None:
    cfg = RaftConfig(max_append_entries=1)  # one entry per append, so we can stop in between
    sim = Sim(n=3, config=cfg)
    sim.load(1, HardState(2, None, 1), log(1, 2))  # entry 2 (term 2) is on node 1 only
    sim.load(2, HardState(2, None, 1), log(1))
    sim.load(3, HardState(2, None, 1), log(1))
    sim.trace = []
    sim.raft(1).campaign()
    # Run until node 2 acknowledged entry 2, but not yet the no-op of term 3.
    assert sim.run_until(lambda: "2->1 APPEND_RESP t3 index=2" in sim.trace, 50)
    lead = sim.raft(1)
    assert lead.term == 3
    assert lead.commit_index == 1  # entry 2 is on a majority, but it is from term 2
    sim.stabilize()
    assert lead.commit_index == 3  # the term-3 no-op commits, and entry 2 with it
    assert [e.index for e in sim.nodes[1].applied] == [1, 2, 3]


def test_leader_counts_its_own_entry_only_once_persisted() -> None:
    sim = Sim(n=3)
    elect(sim)
    sim.crash(3)
    lead = sim.raft(1)
    idx = lead.propose(b"x")
    rd = lead.ready()  # handed out, not yet persisted
    for m in rd.messages:
        if m.to == 2:
            sim.raft(2).step(m)
    for m in drain(sim.raft(2)):
        lead.step(m)
    assert lead.commit_index == idx - 1  # node 2 alone is no majority of 3
    lead.advance(rd)
    assert lead.commit_index == idx


def test_ready_contract_one_outstanding() -> None:
    r = node(1, voters=(1,))
    r.campaign()
    rd = r.ready()
    assert not r.has_ready()
    with pytest.raises(RuntimeError):
        r.ready()
    r.advance(rd)
    assert r.has_ready()


def test_restart_replays_committed_entries_unless_applied() -> None:
    hs, entries = HardState(2, 1, 3), log(1, 1, 2, 2)
    assert [e.index for e in node(1, hard_state=hs, entries=entries).ready().committed] == [1, 2, 3]
    assert [e.index for e in node(1, hard_state=hs, entries=entries, applied=2).ready().committed] == [3]
    with pytest.raises(ValueError):
        node(1, entries=log(1, 1)[1:])


# ---- pre-vote and check-quorum (§9.6 of the thesis) ------------------------------------------


def test_prevote_keeps_a_rejoining_partitioned_node_from_disrupting() -> None:
    sim = Sim(n=3, seed=3)
    elect(sim)
    sim.isolate(3)
    sim.run(100)
    assert sim.raft(3).term == 1  # its pre-votes never succeed, so its term never grows
    sim.heal()
    sim.run(50)
    assert sim.leader() == 1 and sim.raft(1).term == 1
    assert max(sim.raft(i).term for i in (1, 2, 3)) == 1


def test_without_prevote_a_rejoining_node_does_disrupt() -> None:
    sim = Sim(n=3, seed=3, config=RaftConfig(pre_vote=False, check_quorum=False))
    elect(sim)
    sim.isolate(3)
    sim.run(100)
    assert sim.raft(3).term > 1
    sim.heal()
    sim.run(100)
    assert sim.raft(sim.leader()).term > 1  # the contrast: the cluster had to hold a new election


def test_check_quorum_isolated_leader_steps_down_and_majority_elects() -> None:
    sim = Sim(n=3, seed=5)
    elect(sim)
    sim.isolate(1)
    assert sim.run_until(lambda: sim.raft(1).role == FOLLOWER, 2 * sim.config.election_ticks + 1)
    assert sim.run_until(lambda: sim.leader() in (2, 3), 100)
    assert sim.propose(b"after") is not None


def test_without_check_quorum_isolated_leader_stays_leader() -> None:
    sim = Sim(n=3, seed=5, config=RaftConfig(check_quorum=False))
    elect(sim)
    sim.isolate(1)
    sim.run(100)
    assert sim.raft(1).role == LEADER


def test_leader_lease_ignores_vote_requests() -> None:
    r = node(2)
    r.step(Message(MsgKind.HEARTBEAT, "g", 1, 2, 1))
    drain(r)
    r.step(Message(MsgKind.VOTE, "g", 3, 2, 2, 0, 0))
    assert drain(r) == [] and r.term == 1  # heard from leader 1 within an election timeout


def test_minority_leader_cannot_commit() -> None:
    sim = Sim(n=5, seed=1)
    elect(sim)
    sim.partition([1, 2])
    idx = sim.propose(b"lost")
    sim.run(5)
    assert sim.raft(1).commit_index < idx
    assert sim.run_until(lambda: sim.leader() in (3, 4, 5), 200)
    sim.propose(b"kept")
    sim.heal()
    sim.run(60)
    assert all(e.data != b"lost" for e in sim.raft(1).entries_from(1))  # overwritten, never committed


# ---- unclean elections lose committed data, visibly -----------------------------------------------


def test_unclean_truncation_of_committed_entries_rewinds_the_state_machine() -> None:
    r = node(2, cfg=RaftConfig(unclean_election=True))
    r.step(Message(MsgKind.APPEND, "g", 1, 2, 1, entries=tuple(log(1, 1, 1)), commit=3))
    rd = r.ready()
    assert [e.index for e in rd.committed] == [1, 2, 3]
    r.advance(rd)
    # A stale node won an unclean election in term 2 and sends its no-op at index 2.
    r.step(Message(MsgKind.APPEND, "g", 3, 2, 2, log_term=1, index=1, entries=(Entry(2, 2, b""),), commit=1))
    rd = r.ready()
    assert rd.rewind_to == 1 and rd.entries == (Entry(2, 2, b""),)
    assert r.committed_truncations == 1 and r.commit_index == 1


def test_restart_with_entries_newer_than_the_hard_state_takes_their_term() -> None:
    # The shell wrote a Ready's entries (term 5) but crashed before its hard state (still term 3).
    r = node(1, hard_state=HardState(3, 2, 0), entries=log(1, 5))
    assert (r.term, r.vote) == (5, None)
    assert r.ready().hard_state == HardState(5, None, 0)  # and it is persisted again
    r = node(1, hard_state=HardState(3, 2, 0), entries=log(1, 5))
    r.campaign()
    assert {m.term for m in r.ready().messages} == {6}  # never campaigns in a term its log holds


# ---- serving while a Ready is outstanding (the shell's slow fsync) -------------------------------


def test_take_committed_applies_what_two_followers_persisted_while_the_leader_writes() -> None:
    sim = Sim(n=3)
    elect(sim)
    lead = sim.raft(1)
    idx = lead.propose(b"x")
    rd = lead.ready()  # the leader's own write is still running
    for m in rd.messages:
        sim.raft(m.to).step(m)
    for f in (2, 3):
        for m in drain(sim.raft(f)):
            lead.step(m)
    assert lead.commit_index == idx  # two followers are a majority without the leader
    assert [e.data for e in lead.take_committed()] == [b"x"]
    assert lead.take_committed() == ()
    lead.advance(rd)
    assert all(e.index != idx for e in lead.ready().committed)  # never handed out twice


def test_take_messages_lets_heartbeats_out_but_keeps_append_answers_for_the_write() -> None:
    sim = Sim(n=3)
    elect(sim)
    lead, fol = sim.raft(1), sim.raft(2)
    lead.propose(b"x")
    to_2 = [m for m in lead.ready().messages if m.to == 2 and m.kind is MsgKind.APPEND]
    fol.step(to_2[0])
    frd = fol.ready()  # the follower's write of the entry is running
    assert [m.kind for m in frd.messages] == [MsgKind.APPEND_RESP]
    for _ in range(sim.config.heartbeat_ticks):
        lead.tick()
    beats = [m for m in lead.take_messages() if m.to == 2]
    assert [m.kind for m in beats] == [MsgKind.HEARTBEAT]  # out although the leader's Ready is outstanding
    fol.step(beats[0])
    fol.step(Message(MsgKind.APPEND, "g", 1, 2, lead.term, log_term=to_2[0].entries[-1].term,
                     index=to_2[0].entries[-1].index, commit=lead.commit_index))
    assert [m.kind for m in fol.take_messages()] == [MsgKind.HEARTBEAT_RESP]
    fol.advance(frd)
    assert [m.kind for m in fol.ready().messages] == [MsgKind.APPEND_RESP]  # after its write


# ---- idle groups -----------------------------------------------------------------------------


def _heartbeats(sim: Sim, to: int, steps: int) -> int:
    """Heartbeats from the leader (node 1) delivered to `to` over `steps` steps."""
    sim.trace = []
    sim.run(steps)
    n = sum(1 for line in sim.trace if line.startswith(f"1->{to} HEARTBEAT "))
    sim.trace = None
    return n


def test_an_idle_group_heartbeats_every_idle_heartbeat_ticks_until_it_appends_again() -> None:
    sim = Sim(n=3, max_delay=1, config=RaftConfig(heartbeat_ticks=1, election_ticks=10, idle_heartbeat_ticks=4))
    elect(sim)
    assert _heartbeats(sim, 2, 8) >= 7  # appended (the no-op) under election_ticks ago: every tick
    sim.run(4)
    assert _heartbeats(sim, 2, 40) == 10  # idle: one every 4 ticks
    assert sim.leader() == 1 and sim.raft(2).role != CANDIDATE  # nobody timed out
    sim.propose(b"x")
    sim.stabilize()
    assert _heartbeats(sim, 2, 8) >= 7  # busy again: every tick
    assert [sim.raft(i).commit_index for i in (1, 2, 3)] == [2, 2, 2]


def test_a_follower_behind_keeps_the_group_on_full_rate_heartbeats() -> None:
    sim = Sim(n=3, max_delay=1, config=RaftConfig(heartbeat_ticks=1, election_ticks=10, idle_heartbeat_ticks=4))
    elect(sim)
    sim.crash(3)
    sim.propose(b"x")
    sim.stabilize()
    sim.run(12)
    assert sim.raft(1).commit_index == 2
    assert _heartbeats(sim, 2, 20) >= 19  # 3 lacks entry 2: not idle, whatever the ticks since
    sim.restart(3)
    assert sim.run_until(lambda: sim.raft(3).commit_index == 2, 50)  # caught up by the full-rate beats
    sim.run(12)
    assert _heartbeats(sim, 2, 20) == 5  # and now idle


def test_idle_heartbeat_ticks_must_lie_between_heartbeat_and_election_ticks() -> None:
    RaftConfig(heartbeat_ticks=2, election_ticks=10, idle_heartbeat_ticks=2)
    RaftConfig(heartbeat_ticks=2, election_ticks=10, idle_heartbeat_ticks=9)
    for bad in (1, 10):
        with pytest.raises(ValueError, match="idle_heartbeat_ticks"):
            RaftConfig(heartbeat_ticks=2, election_ticks=10, idle_heartbeat_ticks=bad)


# ---- flow control after a pause --------------------------------------------------------------


def _pause_follower(lost_appends: bool) -> tuple[RaftNode, RaftNode, list[Message], int]:
    """Leader 1 and follower 2 go on for 40 ticks and 200 proposals while 3 is paused: what
    they send it waits in its socket (the appends too, unless `lost_appends`). Returns the
    leader, 3, the messages 3 finds on resume, and how many entries 3 lacks."""
    sim = Sim(n=3, config=RaftConfig(heartbeat_ticks=1, election_ticks=50))
    elect(sim)
    lead, f2, f3 = sim.raft(1), sim.raft(2), sim.raft(3)
    held: list[Message] = []
    for t in range(40):
        for _ in range(5):
            lead.propose(b"v%d" % t)
        lead.tick()
        for m in drain(lead):
            if m.to == 2:
                f2.step(m)
            elif m.kind is MsgKind.HEARTBEAT or not lost_appends:
                held.append(m)
        for m in drain(f2):
            lead.step(m)
    assert lead.commit_index == lead.last_index > 200  # 1 and 2 are a majority
    return lead, f3, held, lead.last_index - f3.last_index


@pytest.mark.parametrize("lost_appends", [False, True], ids=["slow-write", "lost-appends"])
def test_a_resumed_follower_is_sent_its_missing_entries_once_not_once_per_heartbeat(lost_appends: bool) -> None:
    """The soak's 44 MB peer frame: after a pause, a follower answers every queued heartbeat at
    once (heartbeat answers go out before its write of the queued appends, or the appends
    were lost). Each answer reopened the leader's probe, and each probe re-sent the whole
    missing window: 40 answers, 40 copies of ~200 entries in one Ready."""
    lead, f3, held, missing = _pause_follower(lost_appends)
    assert missing == 200 and sum(m.kind is MsgKind.HEARTBEAT for m in held) == 40
    for m in held:  # resumed: 3 reads everything queued in one turn
        f3.step(m)
    rd = f3.ready()  # heartbeat answers go out before its write of the appends, the rest after
    answers = [m for m in rd.messages if m.kind in EARLY_KINDS]
    assert len(answers) == 40 and all(m.kind is MsgKind.HEARTBEAT_RESP for m in answers)
    for m in answers:
        lead.step(m)
    sent = [m for m in lead.ready().messages if m.to == 3 and m.kind is MsgKind.APPEND]
    n = sum(len(m.entries) for m in sent)
    distinct = len({e.index for m in sent for e in m.entries})
    assert n <= missing, f"{len(sent)} appends, {n} entries, {distinct} distinct"
    # ... and 3 still catches up: its answers, then the probe's, bring it to the leader's log.
    f3.advance(rd)
    for m in sent:
        f3.step(m)
    for _ in range(5):
        for m in drain(f3):
            lead.step(m)
        for m in drain(lead):
            if m.to == 3:
                f3.step(m)
    assert f3.last_index == lead.last_index and f3.commit_index == lead.commit_index


def _copies_to(rd_messages, to: int) -> int:  # noqa: ANN001
    """Most copies of one entry among the appends to `to`."""
    seen: dict[int, int] = {}
    for m in rd_messages:
        if m.kind is MsgKind.APPEND and m.to == to:
            for e in m.entries:
                seen[e.index] = seen.get(e.index, 0) + 1
    return max(seen.values(), default=0)


def test_answers_that_switch_probe_and_replicate_in_one_turn_send_one_window() -> None:
    """Rejects (probe from the follower's match) and late acks (pipeline from its match again)
    alternating in one turn: each switch re-sent the window; now the unsent one is dropped."""
    sim = Sim(n=3, config=RaftConfig(heartbeat_ticks=1, election_ticks=50, max_append_entries=5))
    elect(sim)
    lead = sim.raft(1)
    for k in range(10):
        lead.propose(b"v%d" % k)
    sent = [m for m in drain(lead) if m.to == 3 and m.kind is MsgKind.APPEND]
    assert [(m.index, len(m.entries)) for m in sent] == [(1, 5), (6, 5)]
    t = lead.term
    for _ in range(2):  # 3 lost the first window and rejects the second; its ack of 1 comes late
        lead.step(Message(MsgKind.APPEND_RESP, "g", 3, 1, t, index=6, reject=True, reject_hint=1, log_term=t))
        lead.step(Message(MsgKind.APPEND_RESP, "g", 3, 1, t, index=1))
    msgs = drain(lead)
    assert _copies_to(msgs, 3) == 1, [(m.index, len(m.entries)) for m in msgs if m.to == 3]
    assert {e.index for m in msgs if m.to == 3 for e in m.entries} == set(range(2, 12))

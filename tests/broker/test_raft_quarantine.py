"""A node whose storage lost a fsynced log tail stays out of elections until caught up.

Raft assumes durable storage: a node that loses entries it acked, plus one lagging peer, can
elect a leader without a committed entry (a 60-min soak lost an acknowledged transaction so:
n5 committed a PrepareCommit with one follower, corrupt-tail cut it from n5's segment, n5 won
the next term with the lagging follower's vote). raft.py's "Repaired storage" rule.
"""

from __future__ import annotations

import logging
import os
import random

import pytest

from logquake.broker.raft import Entry, HardState, Message, MsgKind, RaftConfig, RaftNode
from logquake.broker.raftsim import Sim, heal_and_commit
from logquake.broker.storage import SegmentLog

LONG = RaftConfig(repair_quarantine_ticks=10_000)  # released only by catching up


def _commit_on_two_then_lose_it_on_the_leader(sim: Sim) -> Entry:
    """Leader 1 commits an entry with follower 2 while 3 lags; then 1 restarts without it
    (its storage cut the tail) and 2, the only other holder, is down."""
    sim.raft(1).campaign()
    sim.stabilize()
    for k in range(3):
        sim.propose(b"before-%d" % k)
        sim.stabilize()
    sim.isolate(3)
    idx = sim.propose(b"prepare-commit")
    sim.stabilize()
    lost = sim.committed[idx]  # node 1 applied it: acknowledged to the client
    sim.crash(2)
    sim.heal()
    hs = sim.nodes[1].hard_state
    sim.load(1, hs, sim.nodes[1].log[: idx - 1], repaired_term=hs.term)
    return lost


def test_a_repaired_leader_cannot_win_with_a_lagging_vote_and_overwrite_a_committed_entry() -> None:
    sim = Sim(n=3, seed=1, config=LONG)
    lost = _commit_on_two_then_lose_it_on_the_leader(sim)
    sim.run(10 * sim.config.election_ticks)  # the holder stays down for a while
    assert not sim.violations, sim.violations
    assert sim.leader() is None and sim.raft(1).quarantined
    sim.restart(2)  # the holder is back: it wins, catches node 1 up and releases it
    assert heal_and_commit(sim, b"after", 300)
    assert not sim.raft(1).quarantined
    sim.check_logs()
    assert not sim.violations, sim.violations
    assert all(sim.raft(i).entry(lost.index) == lost for i in sim.ids)
    sim.crash(1)
    sim.restart(1)  # its log now holds a later term: the next load forgets the repair
    assert sim.nodes[1].repaired_term is None and not sim.raft(1).quarantined


def test_without_the_quarantine_the_oracle_sees_the_committed_entry_lost() -> None:
    sim = Sim(n=3, seed=1, config=RaftConfig(repair_quarantine_ticks=0))
    _commit_on_two_then_lose_it_on_the_leader(sim)
    sim.run(10 * sim.config.election_ticks)
    assert any("lacks committed entry" in v for v in sim.violations), sim.violations


def test_two_repaired_nodes_elect_a_leader_once_the_quarantine_expires() -> None:
    # A crash mid-write (or unsynced pages lost) on two of three nodes: nothing acked was lost,
    # and nobody holds more than they do; only the expiry lets the group elect again.
    ticks = 60
    sim = Sim(n=3, seed=2, config=RaftConfig(repair_quarantine_ticks=ticks))
    log = [Entry(1, i, b"x%d" % i) for i in range(1, 6)]
    hs = HardState(1, 1, 5)
    sim.load(1, hs, log, repaired_term=1)
    sim.load(2, hs, log, repaired_term=1)
    sim.load(3, hs, log[:4])
    sim.run(ticks - 1)
    assert sim.leader() is None
    assert heal_and_commit(sim, b"after", 20 * sim.config.election_ticks)
    sim.check_logs()
    assert not sim.violations, sim.violations


@pytest.mark.parametrize("idle", [True, False])
def test_a_follower_that_lost_acked_entries_catches_up_under_the_same_leader(idle: bool) -> None:
    # The leader believes the follower holds its match: it must walk back below it, told by
    # a heartbeat answer (idle group) or by the rejected probe of the next append.
    sim = Sim(n=3, seed=3, config=LONG)
    sim.raft(1).campaign()
    sim.stabilize()
    for k in range(5):
        sim.propose(b"e%d" % k)
        sim.stabilize()
    sim.corrupt_tail(3, 3)
    assert sim.raft(3).last_index == 3 and sim.raft(3).quarantined
    if not idle:
        sim.propose(b"more")
    assert sim.run_until(lambda: sim.raft(3).entries_from(1) == sim.raft(1).entries_from(1), 50)
    assert sim.leader() == 1 and sim.raft(1).term == 1
    assert sim.raft(3).quarantined  # caught up, but nothing of a later term proves it yet
    assert not sim.violations, sim.violations


def _read(r: RaftNode) -> bool:
    """`quarantined` and `status()` read, checking that neither changed the node."""
    before = dict(vars(r))
    q = r.quarantined
    assert r.status()["quarantined"] == q
    changed = {k: (v, vars(r)[k]) for k, v in before.items() if vars(r)[k] != v}
    assert not changed, f"reading quarantined/status changed {changed}"
    return q


@pytest.mark.parametrize("ticks", [LONG.repair_quarantine_ticks, 40])  # caught up; expired
def test_reading_quarantined_or_status_never_changes_the_node(ticks: int) -> None:
    sim = Sim(n=3, seed=1, config=RaftConfig(repair_quarantine_ticks=ticks))
    _commit_on_two_then_lose_it_on_the_leader(sim)
    seen = []
    for t in range(400):
        if t == 100:
            sim.restart(2)
        sim.run(1)
        seen.append(_read(sim.raft(1)))
    assert seen[0] and not seen[-1]  # the quarantine ended in between, at a tick or a step


@pytest.mark.parametrize("peek", [False, True])
def test_a_later_term_entry_ends_the_quarantine_when_appended(peek: bool) -> None:
    # Leader 1 of term 3 sends node 3 an entry of term 3: node 3 is that leader's copy up to
    # it, so caught up. Leader 2 of term 4 then replaces it with an older-term entry; whether
    # anyone looked at `quarantined` in between must not decide node 3's fate.
    r = RaftNode(group="g", node_id=3, voters=(1, 2, 3), config=LONG, rng=random.Random(3),
                 hard_state=HardState(2, None, 3), entries=[Entry(t, i, b"e") for i, t in ((1, 1), (2, 2), (3, 2))],
                 repaired_term=2)
    assert r.quarantined
    r.step(Message(MsgKind.APPEND, "g", 1, 3, 3, log_term=2, index=3, entries=(Entry(3, 4, b"new"),), commit=3))
    if peek:
        assert not r.quarantined
    r.step(Message(MsgKind.APPEND, "g", 2, 3, 4, log_term=2, index=3, entries=(Entry(2, 4, b"old"),), commit=3))
    assert r.last_term == 2 and r.term == 4
    assert not r.quarantined


def test_storage_remembers_a_cut_tail_across_restarts_until_a_later_term_reaches_it(tmp_path, caplog) -> None:  # noqa: ANN001
    path = tmp_path / "g"
    s = SegmentLog(path)
    s.load()
    s.append([Entry(3, i, b"payload-%d" % i) for i in range(1, 4)])
    s.save_hard_state(HardState(4, 2, 3))
    seg = s._segments[-1]  # noqa: SLF001 - cut the last record as corrupt-tail does
    s.close()
    os.truncate(seg.path, seg.size - 5)
    with caplog.at_level(logging.WARNING, logger="logquake.broker.storage"):
        s = SegmentLog(path)
        assert len(s.load()[1]) == 2
    assert "truncating" in caplog.text
    assert s.repaired_term == 4  # the hard state's term when the tail was lost
    s.close()
    s = SegmentLog(path)
    s.load()
    assert s.repaired_term == 4  # a clean restart before catching up: still quarantined
    s.append([Entry(4, 3, b"same-term")])
    s.close()
    s = SegmentLog(path)
    s.load()
    assert s.repaired_term == 4  # an entry of the repair's own term proves nothing
    s.append([Entry(5, 4, b"later-term")])
    s.close()
    s = SegmentLog(path)
    s.load()
    assert s.repaired_term is None
    s.close()

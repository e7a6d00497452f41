"""Raft safety and liveness over many random schedules of the deterministic simulation."""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from logquake.broker.raft import Message, MsgKind, RaftConfig, RaftNode
from logquake.broker.raftsim import Sim, heal_and_commit, run_many, run_schedule, unsafe

CORRUPT = {"config": RaftConfig(repair_quarantine_ticks=1000), "corrupt_rate": 0.1, "fault_rate": 0.1}
CONFIGS = {
    "default": {},
    "five-nodes": {"n": 5},
    "no-prevote-no-checkquorum": {"config": RaftConfig(pre_vote=False, check_quorum=False)},
    "tiny-flow-control": {"config": RaftConfig(max_append_entries=2, max_inflight=2, max_append_bytes=8)},
    "very-lossy": {"max_drop": 0.6, "fault_rate": 0.1, "max_delay": 8},
    "crash-mid-ready": {"crash_in_ready": 0.01},  # after early appends, before the write
    # Slow writes served meanwhile (take_committed/take_messages), with crashes mid-write.
    "slow-writes": {"slow_write": 0.3, "crash_in_ready": 0.01},
    # The metadata group's: every commit advance also goes out as heartbeats at once.
    "commit-heartbeats": {"config": RaftConfig(commit_heartbeats=True), "slow_write": 0.2},
    # Idle groups heartbeat less: few proposals, so the leaders are often idle; lossy links.
    "idle-heartbeats": {"config": RaftConfig(idle_heartbeat_ticks=4), "propose_rate": 0.05, "max_drop": 0.4},
    # Paused nodes (one, or all as the nemesis does) read all that queued for them at once on
    # resume; with slow writes the leader's appends also wait behind its own write.
    "pauses": {"pause_rate": 0.03, "propose_rate": 0.6},
    "pauses-slow-writes": {"pause_rate": 0.03, "slow_write": 0.3, "propose_rate": 0.6},
    # A node loses its newest persisted (acked) entries and restarts quarantined; here the
    # quarantine outlasts every outage, so a holder is always back before it expires.
    "corrupt-tail": CORRUPT,
    # Fewer faults: a follower that lost acked entries must catch up under the same leader.
    "corrupt-tail-steady-leader": {**CORRUPT, "corrupt_rate": 0.02, "fault_rate": 0.04},
    # A restart's replay in steps: one committed entry a Ready, the rest in later Readies.
    "capped-readies": {"config": RaftConfig(max_committed_entries=1), "slow_write": 0.2, "crash_in_ready": 0.01},
}


def assert_safe(results) -> None:  # noqa: ANN001
    bad = [(r.seed, r.violations[:3]) for r in results if r.violations]
    assert not bad, bad


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_safety_and_liveness_over_random_schedules(name: str) -> None:
    results = run_many(range(100 if name == "default" else 40), **CONFIGS[name])
    assert_safe(results)
    # The schedules did exercise something: elections, crashes and commits.
    assert sum(r.leaders for r in results) > 1.5 * len(results)
    assert sum(r.crashes for r in results) > len(results) // 2
    assert sum(r.committed for r in results) > 10 * len(results)


def test_schedules_are_deterministic() -> None:
    assert run_schedule(42) == run_schedule(42)
    assert run_schedule(42) != run_schedule(43)


def test_unclean_election_loses_committed_entries_and_the_oracle_sees_it() -> None:
    results = run_many(range(60), config=unsafe())
    caught = [r for r in results if r.violations]
    assert caught, "unclean elections never lost a committed entry in 60 schedules"
    assert any("committed entry" in v for r in caught for v in r.violations)
    assert sum(r.committed_truncations for r in results) > 0


def test_without_the_repair_quarantine_a_corrupt_tail_loses_committed_entries() -> None:
    results = run_many(range(60), **{**CORRUPT, "config": RaftConfig(repair_quarantine_ticks=0)})
    assert any("lacks committed entry" in v for r in results for v in r.violations)


def test_oracle_catches_a_node_that_votes_twice_in_a_term(monkeypatch) -> None:  # noqa: ANN001
    # Mutation: forget "one vote per term" (§5.2); the oracle must see two leaders in one term.
    def vote_for_anyone_fresh(self, m: Message) -> None:
        pre = m.kind is MsgKind.PREVOTE
        kind = MsgKind.PREVOTE_RESP if pre else MsgKind.VOTE_RESP
        ok = self._log_ok(m.log_term, m.index)
        self._msgs.append(
            Message(kind, self.group, self.id, m.frm, m.term if ok else self.term, reject=not ok)
        )
        if ok and not pre:
            self._vote = m.frm

    monkeypatch.setattr(RaftNode, "_handle_vote_request", vote_for_anyone_fresh)
    results = run_many(range(30))
    assert any("two leaders in term" in v for r in results for v in r.violations)


def test_oracle_catches_a_leader_that_resends_a_window_within_one_ready(monkeypatch) -> None:  # noqa: ANN001
    # Mutation: keep the appends queued before a follower's progress was reset (probe/replicate).
    monkeypatch.setattr(RaftNode, "_retract_appends", lambda self, p: None)
    results = run_many(range(20), **CONFIGS["pauses"])
    assert any("times in one Ready" in v for r in results for v in r.violations)
    assert max(r.max_copies for r in results) > 2


def test_oracle_catches_a_follower_that_acks_before_persisting() -> None:
    sim = Sim(n=3, seed=1)
    sim.raft(1).campaign()
    sim.stabilize()
    sim.propose(b"acked")
    sim.stabilize()
    committed = dict(sim.committed)
    assert committed
    # Simulate the bug: the followers "forget" entries they acknowledged, and the leader dies.
    for i in (2, 3):
        sim.nodes[i].log = sim.nodes[i].log[:1]
        sim.crash(i)
        sim.restart(i)
    sim.crash(1)
    sim.run_until(lambda: sim.leader() is not None, 200)
    sim.propose(b"other")
    sim.stabilize()
    sim.run(5)
    assert any("committed entry" in v or "lacks committed" in v for v in sim.violations)


@pytest.mark.slow
def test_safety_over_thousands_of_schedules() -> None:
    for kwargs in CONFIGS.values():
        assert_safe(run_many(range(1000, 3000), **kwargs))


class RaftSchedule(RuleBasedStateMachine):
    """Hypothesis picks the schedule (and shrinks a failing one to a minimal story)."""

    def __init__(self) -> None:
        super().__init__()
        self.sim = Sim(n=3, seed=0, max_delay=3)
        self.proposals = 0

    @rule(steps=st.integers(1, 30))
    def run(self, steps: int) -> None:
        self.sim.run(steps)

    @rule(i=st.integers(1, 3))
    def crash(self, i: int) -> None:
        self.sim.crash(i)

    @rule(i=st.integers(1, 3))
    def restart(self, i: int) -> None:
        self.sim.restart(i)

    @rule(side=st.sets(st.integers(1, 3), min_size=1, max_size=2))
    def partition(self, side: set[int]) -> None:
        self.sim.partition(side)

    @rule(a=st.integers(1, 3), b=st.integers(1, 3))
    def cut_one_way(self, a: int, b: int) -> None:
        if a != b:
            self.sim.cut_one_way(a, b)

    @rule()
    def heal(self) -> None:
        self.sim.heal()

    @rule(drop=st.sampled_from([0.0, 0.1, 0.5]))
    def lossy(self, drop: float) -> None:
        self.sim.drop = drop

    @rule(i=st.integers(1, 3))
    def propose(self, i: int) -> None:
        self.proposals += 1
        if self.sim.nodes[i].raft is not None:
            self.sim.propose(b"p%d" % self.proposals, i)

    @invariant()
    def safe(self) -> None:
        assert not self.sim.violations, self.sim.violations

    def teardown(self) -> None:
        sim = self.sim
        assert heal_and_commit(sim, b"final", 600), "no proposal committed everywhere after healing"
        sim.check_logs()
        assert not sim.violations, sim.violations


TestRaftSchedule = RaftSchedule.TestCase
TestRaftSchedule.settings = settings(
    max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_disk_backed_schedules_recover_torn_writes_safely(tmp_path, caplog) -> None:  # noqa: ANN001
    # Real SegmentLogs under every node; a crash inside a Ready tears that write at a random byte.
    with caplog.at_level(logging.WARNING, logger="logquake.broker.storage"):
        results = [run_schedule(s, crash_in_ready=0.03, disk=tmp_path / str(s)) for s in range(15)]
    assert_safe(results)
    assert "truncating" in caplog.text  # torn tails did happen, and were repaired

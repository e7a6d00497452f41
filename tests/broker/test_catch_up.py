"""A restarted broker answers clients only once its metadata is caught up with the cluster's.

A soak's final reads failed for 30 s after two nodes restarted: a restarted broker answered
Metadata from the topics it knew when it stopped, before it had even replayed its own log
(UNKNOWN_TOPIC_OR_PARTITION for every topic), and then that topics it does not replicate had
no partitions (no leader known yet). It now opens its Kafka port only once its metadata group
has applied what the leader had committed (RaftNode.caught_up) and it knows the partitions'
leaders, as a KRaft broker waits for its initial metadata catch-up.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from logquake.broker.localcluster import LocalCluster
from logquake.broker.raft import LEADER, Entry, HardState, Message, MsgKind, RaftConfig, RaftNode


def _follower(entries: int, commit: int) -> RaftNode:
    log = [Entry(1, i, b"x") for i in range(1, entries + 1)]
    return RaftNode(group="m", node_id=2, voters=(1, 2, 3), config=RaftConfig(), rng=random.Random(0),
                    hard_state=HardState(1, None, commit), entries=log)


def _apply_all(r: RaftNode) -> None:
    while r.has_ready():
        r.advance(r.ready())


def test_a_follower_is_caught_up_only_once_it_applied_what_the_leader_told_it() -> None:
    r = _follower(entries=10, commit=4)
    _apply_all(r)
    assert not r.caught_up  # no leader heard from yet, however much it has applied
    r.step(Message(MsgKind.HEARTBEAT, "m", 1, 2, 1, log_term=10, index=1, commit=4))
    _apply_all(r)
    assert r.leader_id == 1 and r.applied_index == 4
    assert not r.caught_up  # the leader has committed up to 10
    r.step(Message(MsgKind.HEARTBEAT, "m", 1, 2, 1, log_term=10, index=2, commit=10))
    _apply_all(r)
    assert r.applied_index == 10 and r.caught_up


def test_a_new_leader_resets_what_the_follower_was_told() -> None:
    r = _follower(entries=5, commit=5)
    r.step(Message(MsgKind.HEARTBEAT, "m", 1, 2, 1, log_term=5, index=1, commit=5))
    _apply_all(r)
    assert r.caught_up
    r.step(Message(MsgKind.APPEND, "m", 3, 2, 2, log_term=1, index=5, entries=(Entry(2, 6, b""),), commit=6))
    assert r.leader_id == 3
    assert not r.caught_up  # entry 6 is committed, not yet applied
    _apply_all(r)
    assert r.caught_up


def test_a_leader_is_caught_up_once_an_entry_of_its_term_is_applied() -> None:
    r = RaftNode(group="m", node_id=1, voters=(1,), config=RaftConfig(), rng=random.Random(0))
    r.campaign()
    assert r.role == LEADER
    _apply_all(r)
    assert r.caught_up


def test_a_restarted_broker_never_answers_from_a_stale_view_of_the_topics(tmp_path: Path) -> None:
    with LocalCluster(n=5, base_dir=tmp_path, broker_overrides={"fsync": "never"}) as c:
        c.start_all()
        c.wait_ready()
        names = [f"t{i}" for i in range(16)]
        for name in names[:8]:
            c.create_topic(name, partitions=1, replication_factor=3)
        c.kill(5)
        for name in names[8:]:  # made while node 5 is down: it learns them from the leader
            c.create_topic(name, partitions=1, replication_factor=3)
        c.start(5)
        stale: dict[tuple[str, int], float] = {}
        answers, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 6 or answers < 20:
            try:
                md = c.metadata(5, names)
            except OSError:  # not listening yet: clients go to the other brokers meanwhile
                time.sleep(0.01)
                continue
            answers += 1
            for err, name, _internal, parts, *_ in md.topics:
                if err != 0 or not parts or any(p[2] < 0 for p in parts):
                    stale.setdefault((name, err), round(time.monotonic() - t0, 2))
            time.sleep(0.01)
        assert stale == {}, f"node 5 answered (topic, error) -> at s after its start: {stale}"

"""Transactions with real clients on a real 3-node cluster: commit and abort visibility under
both isolation levels, fencing of a zombie, the LSO in ListOffsets, and a consume-transform-
produce loop that copies every message exactly once across a leader kill."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.protocol.metadata import ApiVersionsRequest

from logquake.broker import LocalCluster
from logquake.broker.coordination import TXN_STATE_TOPIC, coordinator_partition
from logquake.broker.localcluster import kafka_request
from tests.broker.clients import confluent_produce

END_TXN = 26


@pytest.fixture(scope="module")
def tcluster(cluster: LocalCluster) -> LocalCluster:
    """The module's cluster (conftest.py), once it lists the transaction APIs."""
    keys = {k.api_key for k in kafka_request(*cluster.address(1), ApiVersionsRequest[0]()).api_keys}
    assert END_TXN in keys, "ApiVersions does not list the transaction APIs"
    return cluster


def read_all(bootstrap: str, topic: str, *, isolation: str, want: int, partitions: int = 1,
             timeout: float = 60.0, settle: float = 1.0) -> list[bytes]:
    """Every value of the topic from the beginning: until `want` values, then `settle` s more."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            out += [m.value() for m in c.consume(500, 0.3) if m.error() is None]
            if len(out) >= want:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return out


def txn_producer(bootstrap: str, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(60)
    return p


def test_aborted_invisible_to_read_committed_visible_to_read_uncommitted(tcluster: LocalCluster) -> None:
    bs, topic = tcluster.bootstrap_servers, "txn-visibility"
    tcluster.create_topic(topic, partitions=2)
    p = txn_producer(bs, "visibility")
    for kind, n in [("commit", 20), ("abort", 30), ("commit", 10)]:
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=f"{kind}-{n}-{i}".encode(), partition=i % 2)
        if kind == "commit":
            p.commit_transaction(60)
        else:
            p.flush(60)
            p.abort_transaction(60)
    committed = read_all(bs, topic, isolation="read_committed", want=30, partitions=2)
    uncommitted = read_all(bs, topic, isolation="read_uncommitted", want=60, partitions=2)
    assert sorted(committed) == sorted(f"commit-{n}-{i}".encode() for n in (20, 10) for i in range(n))
    assert Counter(uncommitted) == Counter(committed + [f"abort-30-{i}".encode() for i in range(30)])


def test_kafka_python_transactions(tcluster: LocalCluster) -> None:
    from kafka import KafkaProducer

    bs, topic = tcluster.bootstrap_servers, "txn-kafka-python"
    tcluster.create_topic(topic)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-txn")
    p.init_transactions()
    p.begin_transaction()
    for i in range(5):
        p.send(topic, f"kept-{i}".encode())
    p.commit_transaction()
    p.begin_transaction()
    for i in range(5):
        p.send(topic, f"dropped-{i}".encode())
    p.flush()
    p.abort_transaction()
    p.close()
    assert read_all(bs, topic, isolation="read_committed", want=5) == [f"kept-{i}".encode() for i in range(5)]
    assert len(read_all(bs, topic, isolation="read_uncommitted", want=10)) == 10


def test_zombie_with_old_epoch_is_fenced(tcluster: LocalCluster) -> None:
    bs, topic = tcluster.bootstrap_servers, "txn-zombie"
    tcluster.create_topic(topic)
    zombie = txn_producer(bs, "zombie")
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie-1")
    zombie.flush(60)
    successor = txn_producer(bs, "zombie")  # same transactional id: bumps the epoch, aborts the open txn
    successor.begin_transaction()
    successor.produce(topic, value=b"successor-1")
    successor.commit_transaction(60)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce(topic, value=b"zombie-2")
        zombie.commit_transaction(30)
    err = fenced.value.args[0]
    assert err.fatal() or "fenced" in err.str().lower(), err
    assert read_all(bs, topic, isolation="read_committed", want=1) == [b"successor-1"]


def test_read_committed_end_offset_is_the_lso(tcluster: LocalCluster) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    bs, topic = tcluster.bootstrap_servers, "txn-lso"
    tcluster.create_topic(topic)
    assert confluent_produce(bs, topic, [b"plain-0", b"plain-1"])[1] == []
    p = txn_producer(bs, "lso")
    p.begin_transaction()
    p.produce(topic, value=b"open-0")
    p.flush(60)
    tp = KTP(topic, 0)
    committed = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_uncommitted")
    try:
        assert committed.end_offsets([tp])[tp] == 2  # stops before the open transaction
        assert uncommitted.end_offsets([tp])[tp] == 3
        p.commit_transaction(60)
        deadline = time.monotonic() + 30
        while committed.end_offsets([tp])[tp] != 4:  # the record and its COMMIT marker
            assert time.monotonic() < deadline, "the LSO did not move past the committed transaction"
            time.sleep(0.2)
    finally:
        committed.close()
        uncommitted.close()


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["sink-leader", "txn-coordinator"])
def test_consume_transform_produce_exactly_once_across_leader_kill(tcluster: LocalCluster, victim: str) -> None:
    bs = tcluster.bootstrap_servers
    source, sink, group = f"eos-in-{victim}", f"eos-out-{victim}", f"eos-copier-{victim}"
    tid = f"eos-copier-{victim}"
    tcluster.create_topic(source, partitions=1)
    tcluster.create_topic(sink, partitions=1)
    n = 10_000
    assert confluent_produce(bs, source, [str(i).encode() for i in range(n)])[1] == []

    def copier() -> tuple[Consumer, Producer]:
        c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        c.subscribe([source])
        return c, txn_producer(bs, tid, **{"transaction.timeout.ms": 30_000})

    consumer, producer = copier()
    copied_at_kill = None
    killed = None
    restarts = 0
    deadline = time.monotonic() + 600
    done = 0
    while done < n:
        assert time.monotonic() < deadline, f"copied {done} of {n} before the deadline"
        msgs = [m for m in consumer.consume(500, 0.5) if m.error() is None]
        if not msgs:
            done = len(read_all(bs, sink, isolation="read_committed", want=0, timeout=2, settle=0))
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, value=b"copy-" + m.value())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
        except KafkaException:
            # Anything may have happened: abort if still possible, then start over from the
            # committed offsets with a fresh pair (the new producer fences the old one).
            try:
                producer.abort_transaction(30)
            except KafkaException:
                pass
            consumer.close()
            consumer, producer = copier()
            restarts += 1
            continue
        done = max(done, msgs[-1].offset() + 1)
        if killed is None and done >= n // 3:
            copied_at_kill = done
            if victim == "sink-leader":
                killed = tcluster.leader(sink, 0)
            else:
                killed = tcluster.leader(TXN_STATE_TOPIC, coordinator_partition(tid))
            tcluster.kill(killed)
    consumer.close()
    tcluster.start(killed)
    tcluster.wait_ready(timeout=60)
    out = read_all(bs, sink, isolation="read_committed", want=n, timeout=120)
    counts = Counter(out)
    assert copied_at_kill is not None
    assert sorted(counts) == sorted(b"copy-%d" % i for i in range(n)), "an input was never copied"
    assert max(counts.values()) == 1, f"copied twice: {[v for v, k in counts.items() if k > 1][:5]}"


@pytest.mark.slow
def test_unsafe_read_committed_leak_shows_an_open_transaction(tmp_path) -> None:
    with LocalCluster(n=3, base_dir=tmp_path, broker_overrides={"unsafe": {"read_committed": "leak"}}) as c:
        c.wait_ready(timeout=60)
        c.create_topic("leak")
        p = txn_producer(c.bootstrap_servers, "leaky")
        p.begin_transaction()
        p.produce("leak", value=b"not-yet-committed")
        p.flush(60)
        # the broker's flaw the harness must report: a read_committed reader sees an open transaction
        assert read_all(c.bootstrap_servers, "leak", isolation="read_committed", want=1) == [b"not-yet-committed"]
        p.abort_transaction(60)


@pytest.mark.slow
def test_unsafe_partial_markers_leave_part_of_a_commit_invisible(tmp_path) -> None:
    with LocalCluster(n=3, base_dir=tmp_path, broker_overrides={"unsafe": {"txn_markers": "partial"}}) as c:
        c.wait_ready(timeout=60)
        c.create_topic("partial", partitions=2)
        p = txn_producer(c.bootstrap_servers, "partial")
        p.begin_transaction()
        p.produce("partial", value=b"p0", partition=0)
        p.produce("partial", value=b"p1", partition=1)
        p.commit_transaction(60)  # answered as committed
        seen = read_all(c.bootstrap_servers, "partial", isolation="read_committed", want=2, partitions=2,
                        timeout=10)
        assert seen == [b"p0"], "only the first partition of the transaction got its COMMIT marker"

"""The idempotent producer against a real 3-node cluster: retried batches are written once,
gaps and stale epochs are refused on the wire, and real clients whose partition leader is
killed mid-stream write no duplicates."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker import LocalCluster
from logquake.broker.localcluster import kafka_request
from tests.broker.clients import confluent_consume

N = 3_000


def batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


def produce_raw(c: LocalCluster, topic: str, records: bytes) -> tuple[int, int]:
    req = ProduceRequest[7](transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        ProduceRequest[7].TopicProduceData(name=topic, partition_data=[
            ProduceRequest[7].TopicProduceData.PartitionProduceData(index=0, records=records)])])
    p = kafka_request(*c.address(c.leader(topic, 0)), req, timeout=30).responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def test_wire_duplicates_gaps_and_stale_epochs(cluster: LocalCluster) -> None:
    topic = "idem-wire"
    cluster.create_topic(topic)
    init = kafka_request(*cluster.address(1), InitProducerIdRequest[3](
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    first = batch(pid, epoch, 0, [b"a", b"b"])
    assert produce_raw(cluster, topic, first) == (0, 0)
    assert produce_raw(cluster, topic, first) == (0, 0)  # a retry: the original offset, not a new write
    assert produce_raw(cluster, topic, batch(pid, epoch, 5, [b"gap"]))[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_raw(cluster, topic, batch(pid, epoch, 2, [b"c"])) == (0, 2)
    bumped = kafka_request(*cluster.address(1), InitProducerIdRequest[3](
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=pid, producer_epoch=epoch))
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)  # KIP-360
    assert produce_raw(cluster, topic, batch(pid, epoch + 1, 0, [b"d"])) == (0, 3)  # sequences restart
    assert produce_raw(cluster, topic, batch(pid, epoch, 3, [b"zombie"]))[0] == 47  # INVALID_PRODUCER_EPOCH
    assert [v for _, v in confluent_consume(cluster.bootstrap_servers, topic, 4, timeout=30)] == [
        b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_leader_killed_mid_stream_writes_no_duplicates(cluster: LocalCluster, client: str) -> None:
    topic = f"idem-kill-{client}"
    cluster.create_topic(topic)
    values = [f"{client}-{i}".encode() for i in range(N)]
    acked: list[bytes] = []
    failed: list[str] = []
    lock = threading.Lock()

    def on_ack(value: bytes, error: object) -> None:
        with lock:
            (failed.append(str(error)) if error else acked.append(value))

    def acked_count() -> int:
        with lock:
            return len(acked)

    if client == "confluent-kafka":
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                      "linger.ms": 2, "batch.num.messages": 50, "message.timeout.ms": 120_000})

        def send(v: bytes) -> None:
            while True:
                try:
                    p.produce(topic, value=v, on_delivery=lambda err, msg: on_ack(msg.value(), err))
                    break
                except BufferError:
                    p.poll(0.1)
            p.poll(0)

        def flush() -> None:
            p.flush(180)
    else:
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, enable_idempotence=True, acks="all",
                           linger_ms=2, batch_size=4096, delivery_timeout_ms=120_000, request_timeout_ms=10_000)

        def send(v: bytes) -> None:
            kp.send(topic, v).add_callback(lambda _m, v=v: on_ack(v, None)).add_errback(
                lambda e, v=v: on_ack(v, e))

        def flush() -> None:
            kp.flush(180)
            kp.close()

    leader = cluster.leader(topic, 0)
    for i, v in enumerate(values):
        send(v)
        if i == N // 3:
            deadline = time.monotonic() + 60
            while acked_count() < N // 4:  # the stream is flowing when the leader dies
                assert time.monotonic() < deadline
                time.sleep(0.05)
                if client == "confluent-kafka":
                    p.poll(0)
            cluster.kill(leader)
    flush()
    cluster.start(leader)
    cluster.wait_ready(timeout=60)
    assert failed == [], failed[:3]
    got = [v for _, v in confluent_consume(cluster.bootstrap_servers, topic, N, timeout=120)]
    dupes = [v for v, k in Counter(got).items() if k > 1]
    assert dupes == [], f"{len(dupes)} values written twice, e.g. {dupes[:3]}"
    assert set(got) == set(acked) == set(values)
    assert got == values, "idempotence also keeps one producer's order"


def test_unsafe_dedup_off_writes_a_retry_twice(tmp_path) -> None:
    with LocalCluster(n=3, base_dir=tmp_path, broker_overrides={"unsafe": {"dedup": "off"}}) as c:
        c.wait_ready(timeout=60)
        c.create_topic("idem-unsafe")
        init = kafka_request(*c.address(1), InitProducerIdRequest[3](
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
        first = batch(init.producer_id, init.producer_epoch, 0, [b"a"])
        assert produce_raw(c, "idem-unsafe", first) == (0, 0)
        assert produce_raw(c, "idem-unsafe", first) == (0, 1)  # the duplicate the harness must catch

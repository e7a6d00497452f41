"""Real clients (confluent-kafka, kafka-python, kcat) against a real 3-node cluster on loopback."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests.broker.clients import confluent_consume, confluent_produce

N = 200
ACKS = [0, 1, "all"]


def _values(tag: str, n: int = N) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def _check_log(got: list[tuple[int, bytes]], values: list[bytes]) -> None:
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(values))), "offsets must be dense and in order"
    assert [v for _, v in got] == values


@pytest.mark.parametrize("acks", ACKS)
def test_confluent_kafka_produce_consume(cluster, acks) -> None:
    topic = f"ck-{acks}"
    cluster.create_topic(topic)
    values = _values(topic)
    offsets, errors = confluent_produce(cluster.bootstrap_servers, topic, values, acks=acks)
    assert errors == []
    if acks != 0:
        assert sorted(offsets) == list(range(N))
    _check_log(confluent_consume(cluster.bootstrap_servers, topic, N), values)


def test_confluent_auto_creates_topic(cluster) -> None:
    values = _values("auto", 10)
    offsets, errors = confluent_produce(cluster.bootstrap_servers, "auto-created", values)
    assert errors == [] and sorted(offsets) == list(range(10))
    _check_log(confluent_consume(cluster.bootstrap_servers, "auto-created", 10), values)


def test_auto_created_topic_is_coming_up_at_topic_level_until_it_has_a_leader(cluster) -> None:
    """While a new topic elects its first leader, Metadata says so for the whole topic, as
    Kafka does: librdkafka then asks again after retry.backoff.ms, whereas a listed partition
    without a leader waits for its once-a-second topic scan (sends to new keys took ~1 s)."""
    from kafka.protocol.metadata import MetadataRequest

    from logquake.broker.localcluster import kafka_request

    R = MetadataRequest[4]
    answers = []
    deadline = time.monotonic() + 30  # a bound for a loaded machine, not a speed check
    while time.monotonic() < deadline:
        node = 1 + len(answers) % 3
        t = kafka_request(*cluster.address(node), R(topics=["coming-up"], allow_auto_topic_creation=True)).topics[0]
        answers.append((t[0], tuple((p[0], p[2]) for p in t[3])))
        if t[0] == 0 and len(answers) > 50:
            break
    assert answers[0] == (5, ())  # LEADER_NOT_AVAILABLE: being created
    assert answers[-1][0] == 0, f"no leader after {len(answers)} Metadata requests in 30 s"
    assert set(answers) <= {(5, ()), *((0, ((0, leader),)) for leader in (1, 2, 3))}, set(answers)


@pytest.mark.parametrize("acks", ACKS)
def test_kafka_python_produce_consume(cluster, acks) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kp-{acks}"
    cluster.create_topic(topic)
    values = _values(topic)
    prod = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks, linger_ms=5)
    futs = [prod.send(topic, v) for v in values]
    prod.flush(60)
    if acks != 0:
        assert sorted(f.get(30).offset for f in futs) == list(range(N))
    prod.close()
    cons = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                         consumer_timeout_ms=20000)
    tp = TopicPartition(topic, 0)
    cons.assign([tp])
    cons.seek_to_beginning(tp)
    got = []
    for m in cons:
        got.append((m.offset, m.value))
        if len(got) == N:
            break
    cons.close()
    _check_log(got, values)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_kcat_produce_consume(cluster, acks) -> None:
    topic = f"kcat-{acks}"
    cluster.create_topic(topic)
    values = _values(topic)
    subprocess.run(["kcat", "-P", "-b", cluster.bootstrap_servers, "-t", topic, "-p", "0",
                    "-X", f"request.required.acks={acks}"],
                   input=b"\n".join(values) + b"\n", check=True, timeout=60)
    out = subprocess.run(["kcat", "-C", "-b", cluster.bootstrap_servers, "-t", topic, "-p", "0", "-o",
                          "beginning", "-c", str(N), "-f", "%o %s\n"], capture_output=True, check=True,
                         timeout=60).stdout
    got = [(int(o), v) for o, v in (line.split(b" ", 1) for line in out.splitlines())]
    _check_log(got, values)


def test_list_offsets_and_watermarks(cluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = "offsets"
    cluster.create_topic(topic)
    offsets, errors = confluent_produce(cluster.bootstrap_servers, topic, _values(topic, 50))
    assert not errors
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "wm"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 50)
        (tp,) = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert tp.offset == 0
        (tp,) = c.offsets_for_times([TopicPartition(topic, 0, 2**62)], timeout=10)
        assert tp.offset == -1  # no record that late: Kafka answers "no offset"
    finally:
        c.close()


def test_confluent_idempotent_producer(cluster) -> None:
    """enable.idempotence: InitProducerId, then sequenced batches accepted in order."""
    topic = "idem"
    cluster.create_topic(topic)
    values = _values(topic, 500)
    offsets, errors = confluent_produce(cluster.bootstrap_servers, topic, values,
                                        extra={"enable.idempotence": True, "linger.ms": 1})
    assert errors == [] and sorted(offsets) == list(range(500))
    _check_log(confluent_consume(cluster.bootstrap_servers, topic, 500), values)


def test_default_confluent_producer_works(cluster) -> None:
    """A producer with nothing but bootstrap.servers (auto-creating its topic)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    acked: list[int] = []
    for i in range(20):
        p.produce("defaults", str(i).encode(), on_delivery=lambda e, m: e is None and acked.append(m.offset()))
    assert p.flush(60) == 0
    assert sorted(acked) == list(range(20))


@pytest.mark.parametrize("overrides", [{"fsync": "interval", "fsync_interval_ms": 20},
                                       {"fsync": "always", "unsafe": {"fsync": "never", "ack": "early"}}],
                         ids=["fsync-interval", "unsafe-fsync-never-ack-early"])
def test_other_fsync_policies_serve_clients(tmp_path, overrides) -> None:
    from logquake.broker import LocalCluster

    with LocalCluster(n=3, base_dir=tmp_path, broker_overrides=overrides) as c:
        c.wait_ready(timeout=60)
        c.create_topic("pol")
        values = _values("pol")
        offsets, errors = confluent_produce(c.bootstrap_servers, "pol", values)
        assert errors == [] and sorted(offsets) == list(range(N))
        _check_log(confluent_consume(c.bootstrap_servers, "pol", N), values)
        assert "fsync never" in c.log_path(1).read_text() or overrides["fsync"] == "interval"

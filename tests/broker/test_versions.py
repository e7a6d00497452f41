"""Every advertised version of our APIs, spoken with kafka-python's own request schemas."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker.apis import APIS, ApiKey
from logquake.broker.localcluster import kafka_request
from tests.broker.clients import in_thread, long_poll_fetch

# DESIGN.md §3's ranges, plus OffsetForLeaderEpoch (23, for kafka-python consumers after a
# leader change) and WriteTxnMarkers (27, between brokers).
ADVERTISED = {
    0: (3, 9), 1: (4, 12), 2: (1, 7), 3: (0, 12), 8: (2, 8), 9: (1, 7), 10: (0, 4), 11: (0, 7), 12: (0, 4),
    13: (0, 4), 14: (0, 5), 18: (0, 3), 19: (2, 5), 22: (0, 4), 23: (2, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3),
    27: (1, 1), 28: (0, 3),
}


def test_the_api_table_is_the_advertised_one() -> None:
    assert {k: (a.min_version, a.max_version) for k, a in APIS.items()} == ADVERTISED


def _versions(key: int) -> list[int]:
    lo, hi = APIS[key].min_version, APIS[key].max_version
    return list(range(lo, hi + 1))


def _batch(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


@pytest.fixture(scope="module")
def leader(cluster):
    cluster.create_topic("ver")
    node = cluster.leader("ver")
    return cluster.address(node)


@pytest.mark.parametrize("v", _versions(ApiKey.API_VERSIONS))
def test_api_versions(cluster, v) -> None:
    R = ApiVersionsRequest[v]
    kw = {"client_software_name": "t", "client_software_version": "1"} if v >= 3 else {}
    resp = kafka_request(*cluster.address(1), R(**kw))
    assert resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == ADVERTISED


@pytest.mark.parametrize("v", _versions(ApiKey.METADATA))
def test_metadata(cluster, leader, v) -> None:
    R = MetadataRequest[v]
    kw = {"allow_auto_topic_creation": False} if v >= 4 else {}
    resp = kafka_request(*cluster.address(1), R(topics=[R.MetadataRequestTopic(name="ver")], **kw))
    (t,) = resp.topics
    assert t.error_code == 0 and t.partitions[0].leader_id >= 1
    assert cluster.address(t.partitions[0].leader_id) == leader
    assert len(resp.brokers) == 3


@pytest.mark.parametrize("v", _versions(ApiKey.PRODUCE))
def test_produce_then_fetch_and_list_offsets(cluster, leader, v) -> None:
    P = ProduceRequest[v]
    req = P(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(
        name="ver", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=_batch([b"a", b"b"]))])])
    resp = kafka_request(*leader, req, timeout=15)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset >= 0
    for fv in _versions(ApiKey.FETCH):
        F = FetchRequest[fv]
        freq = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic="ver", partitions=[
                     F.FetchTopic.FetchPartition(partition=0, fetch_offset=part.base_offset, log_start_offset=-1,
                                                 partition_max_bytes=1 << 20, current_leader_epoch=-1)])],
                 forgotten_topics_data=[], rack_id="")
        fp = kafka_request(*leader, freq).responses[0].partitions[0]
        assert fp.error_code == 0 and fp.high_watermark >= part.base_offset + 2 and fp.records
    for lv in _versions(ApiKey.LIST_OFFSETS):
        L = ListOffsetsRequest[lv]
        lreq = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="ver", partitions=[
            L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=-1)])])
        lp = kafka_request(*leader, lreq).topics[0].partitions[0]
        assert lp.error_code == 0 and lp.offset >= part.base_offset + 2


def test_non_leader_answers_not_leader(cluster, leader) -> None:
    other = next(n for n in (1, 2, 3) if cluster.address(n) != leader)
    P = ProduceRequest[9]
    req = P(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="ver", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=_batch([b"x"]))])])
    part = kafka_request(*cluster.address(other), req).responses[0].partition_responses[0]
    assert part.error_code == 6  # NOT_LEADER_OR_FOLLOWER


def test_long_poll_fetch_returns_when_data_arrives(cluster, leader) -> None:
    L = ListOffsetsRequest[7]
    hw = kafka_request(*leader, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="ver", partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=-1)])])
    ).topics[0].partitions[0].offset
    t, result = in_thread(leader, long_poll_fetch("ver", hw, max_wait_ms=30_000), timeout=60)
    P = ProduceRequest[9]
    kafka_request(*leader, P(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(
        name="ver", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=_batch([b"late"]))])]))
    t.join(60)
    assert result, "the long poll never returned"
    fp = result[0].responses[0].partitions[0]
    assert fp.error_code == 0 and b"late" in fp.records  # returned with the new record, not empty at timeout


def test_long_poll_fetch_waits_for_min_bytes(cluster, leader) -> None:
    """A record smaller than min_bytes does not end the long poll; the second one does."""
    L = ListOffsetsRequest[7]
    hw = kafka_request(*leader, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="ver", partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=-1)])])
    ).topics[0].partitions[0].offset
    freq = long_poll_fetch("ver", hw, max_wait_ms=30_000, min_bytes=len(_batch([b"m1"])) + 1)
    t, result = in_thread(leader, freq, timeout=60)
    P = ProduceRequest[9]

    def produce(v: bytes) -> None:
        kafka_request(*leader, P(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(
            name="ver", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=_batch([v]))])]))

    produce(b"m1")
    t.join(1.0)
    assert t.is_alive() and not result, "the long poll returned before min_bytes were readable"
    produce(b"m2")
    t.join(60)
    assert result, "the long poll never returned"
    fp = result[0].responses[0].partitions[0]
    assert fp.error_code == 0 and b"m1" in fp.records and b"m2" in fp.records


@pytest.mark.parametrize("v", _versions(ApiKey.CREATE_TOPICS))
def test_create_topics_errors(cluster, v) -> None:
    C = CreateTopicsRequest[v]

    def create(name: str, n: int, rf: int) -> int:
        req = C(topics=[C.CreatableTopic(name=name, num_partitions=n, replication_factor=rf, assignments=[],
                                         configs=[])], timeout_ms=10_000, validate_only=False)
        return kafka_request(*cluster.address(1), req, timeout=15).topics[0].error_code

    assert create(f"ct{v}", 2, 3) == 0
    assert create(f"ct{v}", 2, 3) == 36  # TOPIC_ALREADY_EXISTS
    assert create(f"ct{v}-rf", 1, 4) == 38  # INVALID_REPLICATION_FACTOR
    assert create("bad name!", 1, 1) == 17  # INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("v", _versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id_unique(cluster, v) -> None:
    R = InitProducerIdRequest[v]
    kw = {"producer_id": -1, "producer_epoch": -1} if v >= 3 else {}
    ids = {kafka_request(*cluster.address(n), R(transactional_id=None, transaction_timeout_ms=60_000, **kw),
                         timeout=15).producer_id for n in (1, 2, 3)}
    assert len(ids) == 3 and all(i >= 0 for i in ids)


@pytest.mark.parametrize("v", _versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch(cluster, leader, v) -> None:
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest

    md = cluster.metadata(1, ["ver"])
    epoch = md.topics[0].partitions[0].leader_epoch
    L = ListOffsetsRequest[7]
    hw = kafka_request(*leader, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="ver", partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=-1)])])
    ).topics[0].partitions[0].offset
    R = OffsetForLeaderEpochRequest[v]

    def ask(leader_epoch: int, current: int = -1):  # type: ignore[no-untyped-def]
        req = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic="ver", partitions=[
            R.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=current,
                                                            leader_epoch=leader_epoch)])])
        return kafka_request(*leader, req).topics[0].partitions[0]

    cur = ask(epoch, epoch)
    assert cur.error_code == 0 and cur.leader_epoch == epoch and cur.end_offset == hw
    old = ask(0)  # older than every epoch here: Kafka's (requested epoch, start of the first epoch)
    assert (old.leader_epoch, old.end_offset) == (0, 0)
    undefined = ask(-1)
    assert (undefined.leader_epoch, undefined.end_offset) == (-1, -1)
    assert ask(epoch, epoch + 5).error_code == 75  # UNKNOWN_LEADER_EPOCH: the client is ahead of us

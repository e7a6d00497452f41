"""The wire codec: kafka-python's own client-side encoders against our server-side decoder."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker import responses
from logquake.broker.apis import APIS, ApiKey, version_entries
from logquake.broker.codec import (
    BadRequest,
    FrameError,
    Request,
    RequestDecoder,
    encode_response,
)
from logquake.broker.records import InvalidRecords, batches_span, parse_batches, rewrite_batches


def _frame(req, corr: int = 7) -> bytes:
    req.with_header(correlation_id=corr, client_id="t")
    return bytes(req.encode(header=True, framed=True))


def test_decodes_flexible_and_old_versions_split_anywhere() -> None:
    frames = [
        _frame(ApiVersionsRequest[3](client_software_name="x", client_software_version="1"), 1),
        _frame(MetadataRequest[0](topics=[MetadataRequest[0].MetadataRequestTopic(name="a")]), 2),
        _frame(MetadataRequest[12](topics=None, allow_auto_topic_creation=True,
                                   include_topic_authorized_operations=False), 3),
    ]
    data = b"".join(frames)
    for split in (1, 3, 4, 5, len(data) - 1):
        dec = RequestDecoder()
        out = dec.feed(data[:split]) + dec.feed(data[split:])
        assert [r.correlation_id for r in out] == [1, 2, 3]
        assert all(isinstance(r, Request) for r in out)
        assert out[1].body.topics[0].name == "a" and out[2].body.topics is None
        assert out[0].client_id == "t"


def test_too_new_api_versions_gets_v0_error_listing_ranges() -> None:
    # A v4 request (newer than our 0-3) from a future client: header v2, then garbage body.
    body = struct.pack(">hhi", 18, 4, 99) + struct.pack(">h", 1) + b"t" + b"\x00" + b"\x00\x00\x00"
    (bad,) = RequestDecoder().feed(struct.pack(">i", len(body)) + body)
    assert isinstance(bad, BadRequest) and bad.reply is not None
    resp = ApiVersionsResponse.decode(bad.reply[4:], version=3, header=True)
    assert resp.error_code == 35 and resp.header.correlation_id == 99
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges == {k: (lo, hi) for k, lo, hi in version_entries()}
    assert ranges[3] == (0, 12) and ranges[0] == (3, 9) and ranges[1] == (4, 12)


def test_unsupported_api_and_version_close_without_reply() -> None:
    for key, ver in ((4, 0), (0, 2), (0, 10), (3, 13)):
        body = struct.pack(">hhih", key, ver, 5, -1)
        (bad,) = RequestDecoder().feed(struct.pack(">i", len(body)) + body)
        assert isinstance(bad, BadRequest) and bad.reply is None


def test_bad_frame_sizes_raise_frame_error() -> None:
    with pytest.raises(FrameError):
        RequestDecoder().feed(struct.pack(">i", -5) + b"x" * 10)
    with pytest.raises(FrameError):
        RequestDecoder(max_frame_bytes=1024).feed(struct.pack(">i", 2000))


def test_response_round_trip_through_kafka_python() -> None:
    v = 12
    cls = MetadataResponse[v]
    body = cls(brokers=[cls.MetadataResponseBroker(node_id=1, host="h", port=9, rack=None)],
               cluster_id="c", controller_id=1, topics=[])
    out = encode_response(3, v, 42, body)
    back = MetadataResponse.decode(out[4:], version=v, header=True)
    assert back.header.correlation_id == 42 and back.brokers[0].port == 9


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=80), max_size=6), st.integers(0, 2))
def test_fuzzed_frames_never_crash_the_decoder(chunks: list[bytes], framing: int) -> None:
    """Any bytes: the decoder returns requests/bad requests or raises FrameError, nothing else."""
    dec = RequestDecoder(max_frame_bytes=4096)
    for c in chunks:
        if framing == 1 and len(c) >= 8:
            c = struct.pack(">i", len(c)) + c  # well framed, random content
        elif framing == 2 and len(c) >= 8:  # a real header with random body
            key = sorted(APIS)[c[0] % len(APIS)]
            lo, hi = APIS[key].min_version, APIS[key].max_version
            c = struct.pack(">hhi", key, lo + c[1] % (hi - lo + 1), 1) + c[8:]
            c = struct.pack(">i", len(c)) + c
        try:
            for r in dec.feed(c):
                assert isinstance(r, Request | BadRequest)
        except FrameError:
            return


def _batch(n: int, pid: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                                  batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1000 + i, key=None, value=b"v%d" % i, headers=[])
    return bytes(b.build())


def test_record_batches_rewrite_keeps_crc() -> None:
    buf = _batch(3) + _batch(2)
    hs = parse_batches(buf)
    assert [h.record_count for h in hs] == [3, 2] and batches_span(hs) == 5
    out = rewrite_batches(buf, hs, 100, 7)
    hs2 = parse_batches(out)  # CRC still valid
    assert struct.unpack_from(">q", out, hs2[1].start)[0] == 103
    with pytest.raises(InvalidRecords):
        parse_batches(buf[:-1])
    bad = bytearray(buf)
    bad[-1] ^= 1
    with pytest.raises(InvalidRecords):
        parse_batches(bytes(bad))


def test_produce_request_with_records_decodes() -> None:
    R = ProduceRequest[9]
    req = R(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[R.TopicProduceData(
        name="t", partition_data=[R.TopicProduceData.PartitionProduceData(index=0, records=_batch(2))])])
    (r,) = RequestDecoder().feed(_frame(req))
    assert parse_batches(r.body.topic_data[0].partition_data[0].records)[0].record_count == 2


def _range_and_response(key: int) -> tuple[int, int, Any]:
    api = APIS[key]
    return api.min_version, api.max_version, api.response


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_i16, _i32, _i64 = st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_hand_written_produce_response_is_kafka_pythons_bytes(data) -> None:
    lo, hi, resp = _range_and_response(ApiKey.PRODUCE)
    v = data.draw(st.integers(lo, hi))
    parts = data.draw(st.lists(st.tuples(st.sampled_from(["a", "tópico", "x" * 200]), _i32, _i16, _i64), max_size=4))
    corr = data.draw(_i32)
    cls = resp[v]
    T = cls.TopicProduceResponse
    by_topic: dict[str, list] = {}
    for t, p, err, base in parts:
        by_topic.setdefault(t, []).append(T.PartitionProduceResponse(
            index=p, error_code=err, base_offset=base, log_append_time_ms=-1, log_start_offset=0,
            record_errors=[], error_message=None))
    want = encode_response(ApiKey.PRODUCE, v, corr, cls(
        throttle_time_ms=0, responses=[T(name=t, partition_responses=ps) for t, ps in by_topic.items()]))
    assert encode_response(ApiKey.PRODUCE, v, corr, responses.produce_response(v, parts)) == want


_fetch_parts = st.lists(st.tuples(
    _i32, _i16, _i64, _i64, _i64,
    st.none() | st.lists(st.tuples(_i64, _i64), max_size=3),
    st.binary(max_size=300)), max_size=3)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_hand_written_fetch_response_is_kafka_pythons_bytes(data) -> None:
    lo, hi, resp = _range_and_response(ApiKey.FETCH)
    v = data.draw(st.integers(lo, hi))
    topics = data.draw(st.lists(st.tuples(_names, _fetch_parts), max_size=3))
    corr = data.draw(_i32)
    cls = resp[v]
    T = cls.FetchableTopicResponse
    A = T.PartitionData.AbortedTransaction
    objs = [T(topic=t, partitions=[T.PartitionData(
        partition_index=i, error_code=err, high_watermark=hw, last_stable_offset=lso, log_start_offset=start,
        aborted_transactions=None if ab is None else [A(producer_id=p, first_offset=f) for p, f in ab],
        preferred_read_replica=-1, records=rec) for i, err, hw, lso, start, ab, rec in ps]) for t, ps in topics]
    want = encode_response(ApiKey.FETCH, v, corr, cls(throttle_time_ms=0, error_code=0, session_id=0, responses=objs))
    assert encode_response(ApiKey.FETCH, v, corr, responses.fetch_response(v, topics)) == want


_int32_lists = st.lists(_i32, max_size=4)
_meta_parts = st.lists(st.tuples(_i16, _i32, _i32, _i32, _int32_lists, _int32_lists, _int32_lists), max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_hand_written_metadata_response_is_kafka_pythons_bytes(data) -> None:
    lo, hi, resp = _range_and_response(ApiKey.METADATA)
    v = data.draw(st.integers(lo, hi))
    brokers = data.draw(st.lists(st.tuples(_i32, _names, _i32, st.none() | _names), max_size=4))
    topics = data.draw(st.lists(st.tuples(
        _i16, st.none() | _names, st.none() | st.uuids(), st.booleans(), _meta_parts), max_size=3))
    cluster_id, controller, corr = data.draw(st.none() | _names), data.draw(_i32), data.draw(_i32)
    cls = resp[v]
    T = cls.MetadataResponseTopic
    want = encode_response(ApiKey.METADATA, v, corr, cls(
        throttle_time_ms=0, cluster_id=cluster_id, controller_id=controller,
        brokers=[cls.MetadataResponseBroker(node_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers],
        topics=[T(error_code=err, name=name, topic_id=tid, is_internal=internal, authorized_operations=None,
                  partitions=[T.MetadataResponsePartition(
                      error_code=pe, partition_index=i, leader_id=ld, leader_epoch=ep, replica_nodes=rs,
                      isr_nodes=isr, offline_replicas=off) for pe, i, ld, ep, rs, isr, off in parts])
                for err, name, tid, internal, parts in topics]))
    got = responses.metadata_response(v, brokers, cluster_id, controller, topics)
    assert encode_response(ApiKey.METADATA, v, corr, got) == want

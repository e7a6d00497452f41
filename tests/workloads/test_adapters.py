"""Both client adapters against real brokers (LocalCluster: broker processes on 127.0.0.1)."""

from __future__ import annotations

import time

import pytest

from logquake.history import FAIL, INFO, INVOKE, OK, Op
from logquake.workloads import Validated
from logquake.workloads.confluent import ConfluentClient
from logquake.workloads.kafkapython import KafkaPythonClient

CLIENTS = {"confluent": ConfluentClient, "kafka-python": KafkaPythonClient}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from logquake.broker import LocalCluster

    with LocalCluster(n=3, base_dir=tmp_path_factory.mktemp("lc")) as c:
        c.wait_ready()
        yield c


def _requires_api(cluster, api_key: int, what: str) -> None:
    """Skip, naming the missing feature, when the broker does not advertise `api_key` yet."""
    from kafka.protocol.metadata import ApiVersionsRequest

    from logquake.broker.localcluster import kafka_request

    host, port = cluster.address(1)
    resp = kafka_request(host, port, ApiVersionsRequest[0]())
    keys = {a.api_key for a in resp.api_keys}
    if api_key not in keys:
        pytest.skip(f"the broker does not implement {what} yet (no API key {api_key})")


def _op(f, value, process=0, **extra):
    return Op(process=process, type=INVOKE, f=f, value=value, extra=extra)


def _client(cluster, kind, **kw):
    c = Validated(CLIENTS[kind](op_timeout=15.0, **kw))
    c.open(cluster.bootstrap_servers)
    return c


def _poll_until(c, want: dict[int, int], timeout=60.0):
    """Poll until each key's values up to want[k] were read; the records read, per key."""
    got: dict[int, list[list[int]]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = c.invoke(_op("poll", [["poll"]]))
        assert done.type == OK, done
        for k, pairs in done.value[0][1].items():
            got.setdefault(int(k), []).extend(pairs)
        if all(len(got.get(k, [])) >= n for k, n in want.items()):
            return got
    pytest.fail(f"read only {got} of {want}")


@pytest.mark.parametrize("kind", CLIENTS)
def test_sends_get_offsets_and_polls_read_them_in_order(cluster, kind):
    key = 100 if kind == "confluent" else 200
    c = _client(cluster, kind)
    try:
        offsets = []
        for v in (1, 2, 3):
            done = c.invoke(_op("send", [["send", key, v]]))
            assert done.type == OK, done
            assert done.value[0][2][1] == v
            offsets.append(done.value[0][2][0])
        assert offsets == sorted(offsets) and len(set(offsets)) == 3
        assert c.invoke(_op("assign", [key])).type == OK
        got = _poll_until(c, {key: 3})
        assert got[key] == [[o, v] for o, v in zip(offsets, (1, 2, 3), strict=True)]
        # seek-back: a failed op's reads are read again by the next poll
        c.client._seek_back([["poll", {str(key): got[key][1:]}]])
        again = _poll_until(c, {key: 2})
        assert again[key][:2] == got[key][1:]
    finally:
        c.close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_transactions_commit_sends_visible_to_read_committed(cluster, kind):
    _requires_api(cluster, 24, "transactions (AddPartitionsToTxn)")
    key = 110 if kind == "confluent" else 210
    c = _client(cluster, kind, txn=True)
    try:
        done = c.invoke(_op("txn", [["send", key, 1], ["poll"], ["send", key, 2]]))
        assert done.type == OK, done
        offs = [done.value[0][2][0], done.value[2][2][0]]
        assert offs[1] > offs[0]
        assert c.invoke(_op("assign", [key], seek_to_beginning=True)).type == OK
        got = _poll_until(c, {key: 2})
        assert [v for _, v in got[key]] == [1, 2]
    finally:
        c.close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_subscribe_reads_what_was_sent(cluster, kind):
    _requires_api(cluster, 11, "consumer groups (JoinGroup)")
    key = 120 if kind == "confluent" else 220
    c = _client(cluster, kind, sub_via="subscribe")
    try:
        assert c.invoke(_op("send", [["send", key, 1]])).type == OK
        assert c.invoke(_op("subscribe", [key])).type == OK
        got = _poll_until(c, {key: 1})
        assert [v for _, v in got[key]] == [1]
        assert c.invoke(_op("assign", [key], seek_to_beginning=True)).type == OK  # leaves the group
        assert _poll_until(c, {key: 1})[key][0][1] == 1
    finally:
        c.close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_send_with_no_broker_answering_is_info_never_fail(tmp_path, kind):
    from logquake.broker import LocalCluster

    with LocalCluster(n=1, base_dir=tmp_path) as lc:
        lc.wait_ready()
        c = CLIENTS[kind](op_timeout=3.0)
        c.open(lc.bootstrap_servers)
        try:
            assert c.invoke(_op("send", [["send", 1, 1]])).type == OK
            lc.kill(1)
            done = c.invoke(_op("send", [["send", 1, 2]]))
            assert done.type == INFO, done
            assert done.type != FAIL
            assert done.value == [["send", 1, 2]]  # unfinished micro-op keeps its invoked form
        finally:
            c.close()

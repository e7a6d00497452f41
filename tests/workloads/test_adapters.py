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
            io_thread = getattr(c._producer, "_sender", None)  # kafka-python's
            c.close()
        # Closed with the record unsent, no thread goes on sending it (kafka-python's close
        # raised at its flush timeout and left its I/O thread running for the process's life).
        assert io_thread is None or not io_thread.is_alive()


def _leave_open(c, kind: str, key: int, v: int) -> None:
    """Begin a transaction on the client's producer, write `v` to `key`, end nothing."""
    p, (t, part) = c.client._producer, c.client.keymap.topic_partition(key)
    p.begin_transaction()
    if kind == "confluent":
        p.produce(t, value=str(v).encode(), key=str(key).encode(), partition=part)
        assert p.flush(15) == 0
    else:
        p.send(t, value=str(v).encode(), key=str(key).encode(), partition=part).get(timeout=15)


def _read_committed(cluster, kind: str, key: int, want: int) -> list[int]:
    """The values a fresh read_committed client reads from `key` once it has read `want` values."""
    r = _client(cluster, kind, txn=True)
    try:
        assert r.invoke(_op("assign", [key], seek_to_beginning=True)).type == OK
        return [v for _, v in _poll_until(r, {key: want})[key]]
    finally:
        r.close()


@pytest.fixture
def long_txn_timeout(monkeypatch):
    """Transactions left open stay open for the whole test unless a producer ends them."""
    from logquake.workloads import confluent, kafkapython

    monkeypatch.setattr(confluent, "TXN_TIMEOUT_MS", 300_000)
    monkeypatch.setattr(kafkapython, "TXN_TIMEOUT_MS", 300_000)


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_replaced_producer_ends_the_transaction_its_predecessor_left_open(cluster, kind, long_txn_timeout):
    # After a commit of unknown outcome the adapter replaces its producer. Under a fresh
    # transactional id the old transaction would hold the partition's last stable offset
    # for the whole transaction timeout, and read_committed readers would see nothing of
    # later commits (the exactly-once runs' `unseen`); under the same id it ends at once.
    _requires_api(cluster, 24, "transactions (AddPartitionsToTxn)")
    key = 130 if kind == "confluent" else 230
    c = _client(cluster, kind, txn=True)
    try:
        assert c.invoke(_op("txn", [["send", key, 1]])).type == OK
        tid = c.client._txn_id
        _leave_open(c, kind, key, 2)
        c.client._reopen_producer()  # what the adapter does after a commit of unknown outcome
        assert c.client._txn_id == tid
        done = c.invoke(_op("txn", [["send", key, 3]]))
        assert done.type == OK, done
    finally:
        c.close()
    assert _read_committed(cluster, kind, key, 2) == [1, 3]  # 2 was aborted, nothing hides 3


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_new_client_takes_a_closed_ones_transactional_id_and_ends_its_transaction(cluster, kind,
                                                                                     long_txn_timeout):
    # A worker's next client (after a crash or a hung call) fences the one it replaces.
    _requires_api(cluster, 24, "transactions (AddPartitionsToTxn)")
    key = 140 if kind == "confluent" else 240
    c1 = _client(cluster, kind, txn=True)
    assert c1.invoke(_op("txn", [["send", key, 1]])).type == OK
    tid = c1.client._txn_id
    _leave_open(c1, kind, key, 2)
    c1.close()
    c2 = _client(cluster, kind, txn=True)
    try:
        assert c2.client._txn_id == tid
        done = c2.invoke(_op("txn", [["send", key, 3]]))
        assert done.type == OK, done
    finally:
        c2.close()
    assert _read_committed(cluster, kind, key, 2) == [1, 3]


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_txn_marked_abort_is_aborted_on_purpose_and_never_read_committed(cluster, kind):
    _requires_api(cluster, 24, "transactions (AddPartitionsToTxn)")
    key = 150 if kind == "confluent" else 250
    c = _client(cluster, kind, txn=True)
    try:
        done = c.invoke(_op("txn", [["send", key, 1], ["send", key, 2]], abort=True))
        assert done.type == FAIL and done.get("error") == "aborted on purpose", done
        assert done.get("abort") is True  # the history shows it was meant
        assert c.invoke(_op("txn", [["send", key, 3]])).type == OK
    finally:
        c.close()
    assert _read_committed(cluster, kind, key, 1) == [3]

"""Client helpers and the adapters' error tables, without a broker."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError

from logquake.history import FAIL, INFO, INVOKE, OK, Op
from logquake.workloads import KeyMap, Validated, WithTimeout, complete, confluent, kafkapython, seek_back
from logquake.workloads.client import ContractError


def test_keymap_round_trips():
    for parts in (1, 3):
        km = KeyMap(partitions=parts)
        for k in range(20):
            t, p = km.topic_partition(k)
            assert km.key(t, p) == k
    assert KeyMap().topic_partition(7) == ("lq-7", 0)
    assert KeyMap(partitions=4).topic_partition(7) == ("lq-1", 3)


def test_seek_back_is_the_first_offset_polled_per_key():
    value = [["poll", {"1": [[5, 10], [6, 11]], "2": [[40, 3]]}], ["send", 1, 12], ["poll", {"1": [[7, 12]]}]]
    assert seek_back(value) == {1: 5, 2: 40}
    assert seek_back([["poll"], ["send", 3, 4]]) == {}
    assert seek_back(None) == {}


def test_confluent_table_fails_only_where_nothing_was_written():
    assert confluent.classify(KafkaError(KafkaError._PURGE_QUEUE)) == FAIL
    assert confluent.classify(KafkaError(KafkaError.INVALID_PRODUCER_EPOCH)) == FAIL
    for code in (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION,
                 KafkaError._TRANSPORT, KafkaError._PURGE_INFLIGHT, KafkaError.REQUEST_TIMED_OUT):
        assert confluent.classify(KafkaError(code)) == INFO
    assert confluent.classify(None) == INFO


def test_kafkapython_table_fails_only_where_nothing_was_written():
    import kafka.errors as e

    assert kafkapython.classify(e.InvalidProducerEpochError()) == FAIL
    for exc in (e.KafkaTimeoutError(), e.NotLeaderForPartitionError(), e.RequestTimedOutError(),
                ConnectionError(), RuntimeError("?")):
        assert kafkapython.classify(exc) == INFO


def test_producer_configs_default_to_acks_all_idempotent_and_honour_acks_1():
    c = confluent.producer_config("h:1", txn=False, producer={})
    assert c["acks"] == "all" and c["enable.idempotence"] is True
    c = confluent.producer_config("h:1", txn=False, producer={"acks": 1})
    assert c["acks"] == "1" and c["enable.idempotence"] is False
    k = kafkapython.producer_config("h:1", txn=True, producer={})
    assert k["acks"] == "all" and k["enable_idempotence"] and k["transactional_id"]
    k = kafkapython.producer_config("h:1", txn=False, producer={"acks": "1"})
    assert k["acks"] == 1 and not k["enable_idempotence"]


class _Echo:
    """A client that completes ops as told (a test double of the Client contract itself)."""

    def __init__(self, transform=None, block: threading.Event | None = None):
        self.transform = transform or (lambda op: complete(op, OK, op.value))
        self.block = block
        self.closed = False

    def open(self, bootstrap_servers):
        pass

    def invoke(self, op):
        if self.block is not None:
            self.block.wait(30)
        return self.transform(op)

    def close(self):
        self.closed = True


def _inv(f="send", value=None):
    return Op(process=3, type=INVOKE, f=f, value=value or [["send", 1, 1]])


def test_validate_accepts_good_completions_and_rejects_bad_ones():
    assert Validated(_Echo()).invoke(_inv()).type == OK
    with pytest.raises(ContractError):
        Validated(_Echo(lambda op: complete(op, "invoke", op.value))).invoke(_inv())
    with pytest.raises(ContractError):
        Validated(_Echo(lambda op: complete(op, OK, []))).invoke(_inv())
    with pytest.raises(ContractError):
        Validated(_Echo(lambda op: Op(process=4, type=OK, f="send", value=op.value))).invoke(_inv())


def test_timeout_turns_a_hang_into_info_and_marks_the_client_broken():
    release = threading.Event()
    inner = _Echo(block=release)
    c = WithTimeout(inner, timeout=0.2)
    done = c.invoke(_inv())
    assert done.type == INFO and done.get("error") == "timeout" and c.broken
    release.set()
    c.close()
    ok = WithTimeout(_Echo(), timeout=5)
    assert ok.invoke(_inv()).type == OK and not ok.broken


def test_txn_ids_lend_the_lowest_free_id_and_take_it_back():
    from logquake.workloads.client import TxnIds

    ids = TxnIds("lq-txn-7")
    a, b, c = ids.acquire(), ids.acquire(), ids.acquire()
    assert (a, b, c) == ("lq-txn-7-0", "lq-txn-7-1", "lq-txn-7-2")
    ids.release(b)
    ids.release(b)  # twice changes nothing
    ids.release(a)
    assert [ids.acquire(), ids.acquire(), ids.acquire()] == ["lq-txn-7-0", "lq-txn-7-1", "lq-txn-7-3"]


def test_an_abandoned_client_hands_its_txn_id_to_the_next_one_at_once():
    # The runner's watchdog abandons a client whose call hangs; its successor must take the
    # same transactional id (to fence it) even though the hung client is not closed yet.
    # (QueueClient's; librdkafka builds clients without a broker, kafka-python would not.)
    from logquake.workloads.client import Abandonable
    from logquake.workloads.confluent import ConfluentClient

    nowhere = "127.0.0.1:9"  # nothing listens: the clients are only constructed
    hung, nxt, other = ConfluentClient(txn=True), ConfluentClient(txn=True), ConfluentClient(txn=True)
    try:
        hung.open(nowhere)
        tid = hung._txn_id
        assert isinstance(hung, Abandonable)
        hung.abandon()
        nxt.open(nowhere)
        assert nxt._txn_id == tid
        hung.close()  # gives back nothing more: the id is nxt's now
        other.open(nowhere)
        assert other._txn_id != tid
    finally:
        for c in (hung, nxt, other):
            c.close()

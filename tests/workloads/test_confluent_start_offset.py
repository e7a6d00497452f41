"""The confluent adapter starts unread keys at a real offset, never a logical one.

librdkafka resolves OFFSET_BEGINNING with ListOffsets; a reply it drops as outdated re-arms a
timer that later moves a partition assigned at a real offset back to the log start (see
confluent.START_OFFSET). With no logical start offset that machinery never runs.
"""

from __future__ import annotations

import logging
import time

import pytest

from logquake.history import INVOKE, OK, Op
from logquake.workloads import Validated, confluent
from logquake.workloads.confluent import ConfluentClient


def _op(f, value, **extra):
    return Op(process=0, type=INVOKE, f=f, value=value, extra=extra)


def test_assign_and_seek_back_give_librdkafka_only_real_offsets():
    c = ConfluentClient(op_timeout=2.0)
    c.open("127.0.0.1:1")  # assign is local to the consumer: no broker needed
    try:
        assert c.invoke(_op("assign", [1, 2, 3])).type == OK
        assert all(tp.offset >= 0 for tp in c._consumer.assignment()), c._consumer.assignment()
        c.position[2] = 7
        c._seek_back([["poll", {"2": [[5, 1]]}]])  # re-assigns every key, key 2 at 5
        offsets = {tp.topic: tp.offset for tp in c._consumer.assignment()}
        assert offsets == {"lq-1": 0, "lq-2": 5, "lq-3": 0}
        assert c.invoke(_op("assign", [1, 2], seek_to_beginning=True)).type == OK
        assert {tp.topic: tp.offset for tp in c._consumer.assignment()} == {"lq-1": 0, "lq-2": 0}
    finally:
        c.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from logquake.broker import LocalCluster

    with LocalCluster(n=1, base_dir=tmp_path_factory.mktemp("lc")) as lc:
        lc.wait_ready()
        yield lc


def test_a_consumer_reads_from_the_start_without_any_offset_lookup(cluster, monkeypatch, caplog):
    plain = confluent.consumer_config
    monkeypatch.setattr(confluent, "consumer_config", lambda *a, **kw: {**plain(*a, **kw), "debug": "topic"})
    caplog.set_level(logging.DEBUG, logger="logquake.client.confluent")
    key = 300
    c = Validated(ConfluentClient(op_timeout=15.0))
    c.open(cluster.bootstrap_servers)
    try:
        assert c.invoke(_op("assign", [key])).type == OK
        for v in (1, 2):
            assert c.invoke(_op("send", [["send", key, v]])).type == OK
        got: list[list[int]] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            done = c.invoke(_op("poll", [["poll"]]))
            assert done.type == OK, done
            got += done.value[0][1].get(str(key), [])
        assert got == [[0, 1], [1, 2]]
    finally:
        c.close()
    lookups = [r.getMessage() for r in caplog.records if "logical offset" in r.getMessage()]
    assert lookups == []


def test_the_first_polls_after_assigning_a_new_topic_read_it(cluster):
    """librdkafka would ask for a newly assigned topic's metadata only at its 1 s scan of
    unknown topics (~9 empty polls of 100 ms); the adapter asks at the assign."""
    key = 301
    writer = Validated(ConfluentClient(op_timeout=15.0))
    writer.open(cluster.bootstrap_servers)
    reader = Validated(ConfluentClient(op_timeout=15.0))
    reader.open(cluster.bootstrap_servers)
    try:
        for v in (1, 2):
            assert writer.invoke(_op("send", [["send", key, v]])).type == OK
        assert reader.invoke(_op("poll", [["poll"]])).type == OK  # the consumer is up, nothing assigned
        assert reader.invoke(_op("assign", [key])).type == OK
        got: list[list[int]] = []
        for _ in range(3):
            got += reader.invoke(_op("poll", [["poll"]])).value[0][1].get(str(key), [])
        assert got == [[0, 1], [1, 2]]
    finally:
        writer.close()
        reader.close()

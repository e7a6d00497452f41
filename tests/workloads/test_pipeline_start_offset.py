"""A pipeline worker's reset seeks a partition with nothing committed to a real offset.

A logical OFFSET_BEGINNING makes librdkafka look the offset up with ListOffsets, and a reply it
drops as outdated can later rewind the partition to the log start (confluent.START_OFFSET).
"""

from __future__ import annotations

import logging
import time

import pytest

from logquake.guarantees import GUARANTEES
from logquake.workloads import pipeline


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from logquake.broker import LocalCluster

    with LocalCluster(n=1, base_dir=tmp_path_factory.mktemp("lc")) as lc:
        lc.wait_ready()
        yield lc


def _consume(worker: pipeline.Worker, n: int, timeout: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [m for m in worker.consumer.consume(num_messages=50, timeout=0.5) if m.error() is None]
    return got


def test_reset_with_nothing_committed_rereads_from_offset_0_without_a_lookup(cluster, monkeypatch, caplog):
    plain = pipeline.worker_consumer_config
    monkeypatch.setattr(pipeline, "worker_consumer_config", lambda *a: {**plain(*a), "debug": "topic"})
    caplog.set_level(logging.DEBUG, logger="logquake.pipeline")
    hist = pipeline.History()
    pipeline.produce_inputs(cluster.bootstrap_servers, 1, 3, hist)
    worker = pipeline.Worker(0, cluster.bootstrap_servers, GUARANTEES["at-least-once"], 1, hist)
    try:
        first = _consume(worker, 3)
        assert [m.offset() for m in first] == [0, 1, 2]
        caplog.clear()  # the group's own first reset (auto.offset.reset) is librdkafka's business
        worker._reset(first)  # nothing was committed: back to the start of the log
        again = _consume(worker, 3)
    finally:
        worker.consumer.close()
    assert [m.offset() for m in again] == [0, 1, 2]
    # librdkafka names what it was given: a logical start would read "to offset BEGINNING" (and
    # is looked up by ListOffsets unless its cached log start happens to be valid, as here).
    seeks = [r.getMessage() for r in caplog.records if "Seek lq-in-0 [0] to offset" in r.getMessage()]
    assert seeks and all("to offset 0 " in m for m in seeks), seeks
    assert not [r.getMessage() for r in caplog.records if "logical offset" in r.getMessage()]

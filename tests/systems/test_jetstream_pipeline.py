"""The JetStream pipeline (systems/jetstream/pipeline.py) against a real 3-node nats-server cluster.

Each test starts its own cluster (the streams' names are the workload's own). Start servers:
run under the heavy lock.
"""

from __future__ import annotations

import threading
import time

import pytest
from nats.js import api

from logquake.checker.pipeline import check_pipeline
from logquake.guarantees import GUARANTEES
from logquake.history import INFO, OK
from logquake.systems.jetstream.pipeline import JetStreamPipeline, Worker
from logquake.workloads.pipeline import History, run_pipeline

from .jskit import local_lifecycle, running


@pytest.fixture
def cluster(tmp_path):
    with running(local_lifecycle(tmp_path / "js")) as lc:
        yield lc


def _acked(hist: History) -> set[tuple[int, int]]:
    return {(m[1], m[2][1]) for op in hist.ops if op.f == "input" and op.type == OK for m in op.value}


def test_exactly_once_without_faults_processes_every_input_once(cluster):
    profile = GUARANTEES["exactly-once"]
    pipe = JetStreamPipeline(cluster.bootstrap(), profile, replicas=3)
    ops = run_pipeline(cluster.bootstrap(), profile, keys=3, values=60, workers=2, timeout=90, client=pipe)
    res = check_pipeline(ops, guarantee="exactly-once", shared_consumer=True)
    assert res["valid"] is True, res
    assert res["inputs"] == 60 and res["processing_counts"] == {"1": 60}, res
    processed = [op for op in ops if op.f == "process" and op.type == OK]
    assert processed and {op.process for op in processed} <= {0, 1}, "the group's workers, no op unknown"
    # The final read knew where every output stream ended and read up to there.
    finals = [op for op in ops if op.f == "poll" and op.get("final")]
    assert finals and finals[0].get("ends") == {"0": 21, "1": 21, "2": 21}, finals[:1]


def _process_until(worker: Worker, n: int, *, timeout: float = 60.0) -> list[int]:
    """Fetch and process until `n` inputs were consumed; the delivery counts of what it got."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        msgs = worker.fetch()
        if msgs:
            got += [m.metadata.num_delivered for m in msgs]
            assert worker.process_batch(msgs).type == OK
    assert len(got) == n, f"processed {len(got)} of {n} within {timeout:.0f} s"
    return got


def _crash_after_publishing(guarantee: str, cluster, n: int = 5) -> tuple[History, list[int], Worker]:
    """n inputs; worker 0 publishes their results and crashes before acking; once ack_wait
    has passed worker 1 processes what the server delivers again. The whole history."""
    # ack_wait: long enough that the survivor's own batch is never delivered again on a loaded VM.
    pipe = JetStreamPipeline(cluster.bootstrap(), GUARANTEES[guarantee], replicas=3, ack_wait=3.0)
    hist = History()
    pipe.produce_inputs(1, n, hist)
    assert len(_acked(hist)) == n
    crashed = pipe.worker(0, 1, hist)
    msgs: list = []
    deadline = time.monotonic() + 30
    while len(msgs) < n and time.monotonic() < deadline:
        msgs += crashed.fetch()
    assert len(msgs) == n
    acks = crashed.publish_unacked(msgs)
    assert all(isinstance(a, api.PubAck) for a in acks), acks
    crashed.close()
    survivor = pipe.worker(1, 1, hist)
    try:
        deliveries = _process_until(survivor, n)
        pipe.drain(1, hist, want=_acked(hist), timeout=30)
    finally:
        survivor.close()
    pipe.final_read(1, hist, timeout=30)
    return hist, deliveries, survivor


def test_a_redelivered_input_is_processed_twice_at_least_once(cluster):
    hist, deliveries, _ = _crash_after_publishing("at-least-once", cluster)
    assert all(d >= 2 for d in deliveries), deliveries  # the survivor got them again
    res = check_pipeline(hist.ops, guarantee="at-least-once", shared_consumer=True)
    assert res["processing_counts"] == {"2": 5}, res
    assert res["valid"] is True and res["error_types"] == ["double-processing"], res
    # The same output judged as exactly-once: each of the five inputs was processed twice.
    strict = check_pipeline(hist.ops, guarantee="exactly-once", shared_consumer=True)
    assert strict["valid"] is False and strict["anomalies"]["double-processing"]["count"] == 5, strict


def test_a_redelivered_input_is_deduplicated_to_once_exactly_once(cluster):
    hist, deliveries, survivor = _crash_after_publishing("exactly-once", cluster)
    assert all(d >= 2 for d in deliveries), deliveries
    res = check_pipeline(hist.ops, guarantee="exactly-once", shared_consumer=True)
    assert res["valid"] is True and res["processing_counts"] == {"1": 5}, res
    # The survivor's publishes really happened and were dropped by the output stream's dedup.
    done = [op for op in hist.ops if op.f == "process" and op.type == OK and op.process == survivor.index]
    assert sorted(kv[1] for op in done for kv in op.value["deduplicated"]) == [1, 2, 3, 4, 5], done


def test_at_most_once_acks_before_publishing_and_never_processes_twice(cluster):
    pipe = JetStreamPipeline(cluster.bootstrap(), GUARANTEES["at-most-once"], replicas=3)
    hist = History()
    pipe.produce_inputs(2, 20, hist)
    w = pipe.worker(0, 2, hist)
    stop = threading.Event()
    t = threading.Thread(target=w.run, args=(stop,), daemon=True)
    t.start()
    try:
        pipe.drain(2, hist, want=_acked(hist), timeout=60)
    finally:
        stop.set()
        t.join(30)
    pipe.final_read(2, hist, timeout=30)
    res = check_pipeline(hist.ops, guarantee="at-most-once", shared_consumer=True)
    assert res["valid"] is True and res["processing_counts"] == {"1": 20}, res
    done = [op for op in hist.ops if op.f == "process" and op.type == OK]
    assert sum(len(op.value["acked"]) for op in done) == 20 and not any(op.value["deduplicated"] for op in done)


def test_at_most_once_leaves_unprocessed_an_input_acked_after_ack_wait(cluster):
    # A worker slower than ack_wait: the server gives its inputs to another worker, which
    # processes them; the slow one's acks then come too late to make it their only processor.
    pipe = JetStreamPipeline(cluster.bootstrap(), GUARANTEES["at-most-once"], replicas=3, ack_wait=3.0)
    hist = History()
    pipe.produce_inputs(1, 3, hist)
    slow = pipe.worker(0, 1, hist)
    msgs: list = []
    deadline = time.monotonic() + 30
    while len(msgs) < 3 and time.monotonic() < deadline:
        msgs += slow.fetch()
    assert len(msgs) == 3
    time.sleep(4.0)  # past ack_wait
    fast = pipe.worker(1, 1, hist)
    try:
        assert all(d >= 2 for d in _process_until(fast, 3))
        late = slow.process_batch(msgs)
    finally:
        fast.close()
        slow.close()
    assert late.type == INFO and late.value["produced"] == [], late
    pipe.drain(1, hist, want=_acked(hist), timeout=30)
    pipe.final_read(1, hist, timeout=30)
    res = check_pipeline(hist.ops, guarantee="at-most-once", shared_consumer=True)
    assert res["valid"] is True and res["processing_counts"] == {"1": 3}, res

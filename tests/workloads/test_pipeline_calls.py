"""pipeline._bounded: a transactional call that outlives its own timeout is abandoned as timed out."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from logquake.workloads import pipeline


@pytest.fixture
def short(monkeypatch):
    monkeypatch.setattr(pipeline, "TXN_CALL_S", 0.2)
    monkeypatch.setattr(pipeline, "TXN_CALL_GRACE_S", 0.1)


def test_a_call_that_returns_or_raises_is_passed_through(short):
    pipeline._bounded(lambda: None)
    err = KafkaException(KafkaError(KafkaError._FENCED))
    with pytest.raises(KafkaException) as got:
        pipeline._bounded(lambda: (_ for _ in ()).throw(err))
    assert got.value is err


def test_a_call_blocked_past_its_timeout_raises_timed_out_and_is_left_running(short):
    # As librdkafka's send_offsets_to_transaction does with the group coordinator down.
    release = threading.Event()
    with pytest.raises(KafkaException) as got:
        pipeline._bounded(lambda: release.wait(60))
    err = got.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT and not err.txn_requires_abort()  # -> info, fresh producer
    assert any(t.name == "pipe-txn-call" and t.is_alive() for t in threading.enumerate())
    release.set()

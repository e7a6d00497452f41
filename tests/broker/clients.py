"""Small produce/consume helpers over the real clients, shared by broker tests and benchmarks;
and a raw long-polling Fetch, for the broker's wake-ups."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], *, acks: str | int = "all",
                      extra: dict | None = None, timeout: float = 60.0, partition: int = -1
                      ) -> tuple[list[int], list[str]]:
    """Produce values with confluent-kafka (to `partition`, -1: the partitioner's choice);
    returns (acknowledged offsets, error strings)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": str(acks), "linger.ms": 5, **(extra or {})})
    offsets: list[int] = []
    errors: list[str] = []

    def done(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())

    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=partition, on_delivery=done)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(timeout)
    if left:
        errors.append(f"{left} messages still in flight after {timeout}s")
    return offsets, errors


def confluent_consume(bootstrap: str, topic: str, n: int, *, partition: int = 0, timeout: float = 60.0
                      ) -> list[tuple[int, bytes]]:
    """Read (offset, value) from the beginning until n messages or the timeout."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def long_poll_fetch(topic: str, offset: int, *, max_wait_ms: int, min_bytes: int = 1) -> Any:
    """A Fetch v12 of partition 0 of `topic` from `offset`, waiting up to max_wait_ms for min_bytes."""
    F = FetchRequest[12]
    return F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0,
             session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                 partition=0, fetch_offset=offset, log_start_offset=-1, partition_max_bytes=1 << 20)])],
             forgotten_topics_data=[], rack_id="")


def in_thread(address: tuple[str, int], req: Any, *, timeout: float) -> tuple[threading.Thread, list[Any]]:
    """Send `req` from a started thread; the list gets its response once answered."""
    from logquake.broker.localcluster import kafka_request

    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(kafka_request(*address, req, timeout=timeout)), daemon=True)
    t.start()
    return t, result

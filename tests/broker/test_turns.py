"""The node's loop asks only the groups given input since its last turn (and all of them after
a tick): a write must still be answered at once, not at the next tick.

With ten-second ticks, a proposal or an advance that the loop failed to notice would wait for
the next tick's full scan: each acks=all write would then take ~5 s on average instead of a few
ms, so the bound below is hundreds of times what the writes take on a loaded machine and under
half of what the bug costs.
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from logquake.broker import LocalCluster
from logquake.broker.logstats import stats_lines


def test_writes_are_answered_between_ticks(tmp_path) -> None:
    with LocalCluster(n=1, base_dir=tmp_path, broker_overrides={"tick_ms": 10_000}) as c:
        c.wait_ready(timeout=60)
        c.create_topic("t", partitions=1, replication_factor=1)
        p = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=0)
        try:
            p.send("t", b"warm-up").get(timeout=30)
            t0 = time.monotonic()
            offsets = [p.send("t", b"v%d" % i).get(timeout=30).offset for i in range(20)]
            took = time.monotonic() - t0
        finally:
            p.close(timeout=5)
    assert offsets == list(range(1, 21))
    assert took < 45.0, f"20 sequential acks=all writes took {took:.1f} s with 10 s ticks"


def _stats_totals(c: LocalCluster, enough: dict[str, int], timeout: float = 20.0) -> dict[str, int]:
    """The brokers' counters summed over their stats lines, once each has reached `enough` or
    the timeout passed. A line covers the 5 s since the last one: the writes of the last few
    seconds show up only at the next line, so the sums are read until they suffice."""
    deadline = time.monotonic() + timeout
    while True:
        totals = dict.fromkeys(enough, 0)
        for node in (1, 2, 3):
            path = c.log_path(node)
            for _, stats in stats_lines(path.read_text() if path.exists() else ""):
                for k in enough:
                    totals[k] += stats.get(k, 0)
        if all(totals[k] >= n for k, n in enough.items()) or time.monotonic() > deadline:
            return totals
        time.sleep(0.5)


def test_small_writes_are_fsynced_inline_and_big_ones_in_the_writer_thread(tmp_path) -> None:
    # Both ways of persisting a turn must carry acknowledged writes; each must also be taken
    # (a threshold gone wrong would silently send everything one way).
    with LocalCluster(n=3, base_dir=tmp_path, broker_overrides={"fsync": "always"}) as c:
        c.wait_ready(timeout=60)
        c.create_topic("t", partitions=1, replication_factor=3)
        p = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=0,
                          max_request_size=1 << 20)
        values = [b"small-%d" % i for i in range(10)] + [bytes([i]) * (64 << 10) for i in range(5)]
        try:
            offsets = [p.send("t", v).get(timeout=30).offset for v in values]
        finally:
            p.close(timeout=5)
        consumer = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10_000, fetch_max_bytes=1 << 22)
        try:
            consumer.assign([TopicPartition("t", 0)])
            # values first: zip stops at the last value without asking the consumer for one
            # more, which would wait out consumer_timeout_ms on every passing run.
            got = [m.value for _, m in zip(values, consumer, strict=False)]
        finally:
            consumer.close()
        totals = _stats_totals(c, {"inline_fsyncs": 3 * 10, "persist_turns": 1,
                                   "synced_entries": 3 * len(values)})
    assert offsets == list(range(len(values)))
    assert got == values
    assert totals["inline_fsyncs"] >= 3 * 10, totals  # each small write, on every replica
    assert totals["persist_turns"] > 0, totals
    assert totals["synced_entries"] >= 3 * len(values), totals  # every replica fsynced every write

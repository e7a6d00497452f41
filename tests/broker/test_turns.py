"""The node's loop asks only the groups given input since its last turn (and all of them after
a tick): a write must still be answered at once, not at the next tick.

With two-second ticks, a proposal or an advance that the loop failed to notice would wait for
the next tick's full scan: each acks=all write would then take ~1-2 s instead of a few ms, so
the bound below is ~50x what the writes take and a fraction of what the bug costs.
"""

from __future__ import annotations

import time

from kafka import KafkaProducer

from logquake.broker import LocalCluster


def test_writes_are_answered_between_ticks(tmp_path) -> None:
    with LocalCluster(n=1, base_dir=tmp_path, broker_overrides={"tick_ms": 2000}) as c:
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
    assert took < 10.0, f"20 sequential acks=all writes took {took:.1f} s with 2 s ticks"

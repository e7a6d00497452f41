"""Faults against real brokers: a leaders partition moves leadership, LazyFS-backed brokers take writes."""

from __future__ import annotations

import logging

import pytest
from cluster.labkit import require_lab, wait_until

from logquake.cluster import open_cluster
from logquake.config import TestConfig
from logquake.nemesis import build_nemesis, node_needs

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _produce(bootstrap: str, n: int, *, timeout_ms: int = 20000) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": timeout_ms,
                  "logger": logging.getLogger("rdkafka")})
    acked: list[bool] = []
    for i in range(n):
        p.produce("faults", b"v%d" % i, on_delivery=lambda e, m: acked.append(e is None))
    p.flush(timeout_ms / 1000 + 10)
    return sum(acked)


def test_leaders_partition_and_lose_unfsynced_with_real_brokers(tmp_path):
    require_lab()
    cfg = TestConfig(nodes=3, replication_factor=3, nemesis=("partition", "disk"), seed=7)
    with open_cluster(cfg, tmp_path, needs=node_needs(cfg.nemesis)) as c:
        assert c.needs.lazyfs  # data dirs on LazyFS
        c.wait_ready(90)
        assert wait_until(lambda: _produce(c.bootstrap_servers, 20) == 20, timeout=90, what="writes acked")
        old = wait_until(lambda: c.leaders().get("faults/0"), what="a leader for faults/0")
        nemesis = build_nemesis(cfg, c)
        nemesis.setup()
        desc = nemesis.start("partition:leaders")
        assert desc.startswith(f"leaders: {old} drops ")
        wait_until(lambda: c.leaders().get("faults/0") not in (None, old), timeout=90,
                   what="leadership to move away from the isolated leader")
        nemesis.stop()
        desc = nemesis.start("disk:lose-unfsynced")
        assert "unsynced writes dropped" in desc
        nemesis.stop()
        assert nemesis.heal().startswith("healed")
        c.wait_ready(90)
        assert wait_until(lambda: _produce(c.bootstrap_servers, 20) == 20, timeout=90, what="writes after faults")

"""A new transaction coordinator acts without client traffic: an open transaction whose
producer died is timed out and aborted by the coordinator that took over after its old
coordinator was killed, so read_committed readers see past it (Kafka loads a coordinator
partition on election, rather than waiting for a request of that transactional id)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from confluent_kafka import Producer

from logquake.broker import LocalCluster
from logquake.broker.coordination import TXN_STATE_TOPIC, coordinator_partition
from tests.broker.test_txn_clients import read_all

TID = "orphan-txn"

ORPHAN = textwrap.dedent("""
    import os, sys
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
                  "transaction.timeout.ms": 4000})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce("orphan", b"open")
    p.flush(30)
    os._exit(0)  # gone without ending its transaction, like a SIGKILLed producer
""")


def test_new_coordinator_aborts_a_dead_producers_open_transaction(tmp_path) -> None:
    with LocalCluster(n=3, base_dir=tmp_path) as c:
        c.wait_ready(timeout=60)
        c.create_topic("orphan", partitions=1, replication_factor=3)
        c.wait_leaders("orphan", timeout=60)
        subprocess.run([sys.executable, "-c", ORPHAN, c.bootstrap_servers, TID], check=True, timeout=120)
        coordinator = c.leader(TXN_STATE_TOPIC, coordinator_partition(TID))
        assert coordinator > 0
        c.kill(coordinator)
        c.wait_leaders(TXN_STATE_TOPIC, timeout=60, exclude={coordinator})
        survivors = ",".join(f"{h}:{p}" for h, p in (c.address(n) for n in (1, 2, 3) if n != coordinator))
        p = Producer({"bootstrap.servers": survivors, "acks": "all"})
        p.produce("orphan", b"after")
        assert p.flush(60) == 0
        # The open transaction holds the LSO until the new coordinator aborts it (4 s timeout).
        seen = read_all(survivors, "orphan", isolation="read_committed", want=1, timeout=60)
        assert seen == [b"after"]

"""NodeReads (systems/base.py): which client adapters can point a read at one node."""

from __future__ import annotations

from logquake.systems.base import NodeReads
from logquake.systems.jetstream.client import JetStreamClient
from logquake.workloads.confluent import ConfluentClient
from logquake.workloads.kafkapython import KafkaPythonClient


def test_kafka_adapters_offer_no_node_reads_so_their_drain_is_unchanged():
    # A Kafka fetch is served by the partition leader whichever broker the client reaches.
    assert not isinstance(ConfluentClient(), NodeReads)
    assert not isinstance(KafkaPythonClient(), NodeReads)


def test_the_jetstream_adapter_names_a_server_by_address_when_it_does_not_answer():
    # Nothing listens on port 9 of loopback: the node keeps its address for a name.
    assert JetStreamClient().node_bootstraps("nats://127.0.0.1:9") == {"127.0.0.1:9": "nats://127.0.0.1:9"}

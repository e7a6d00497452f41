"""The drain's node reads are declared, never probed: a System says whether its client can
point a read at one node (`node_reads`), a Workload whether its drain makes a final read."""

from __future__ import annotations

from logquake.config import TestConfig
from logquake.systems import get_system
from logquake.systems.jetstream.client import node_bootstraps
from logquake.workloads import WORKLOADS, FinalReads


def test_kafka_systems_declare_no_node_reads_so_their_drain_is_unchanged():
    # A Kafka fetch is served by the partition leader whichever broker the client reaches.
    assert get_system("kafka").node_reads is None
    assert get_system("kafka-external").node_reads is None


def test_jetstream_names_a_server_by_address_when_it_does_not_answer():
    assert get_system("jetstream").node_reads is node_bootstraps
    # Nothing listens on port 9 of loopback: the node keeps its address for a name.
    assert node_bootstraps("nats://127.0.0.1:9") == {"127.0.0.1:9": "nats://127.0.0.1:9"}


def test_a_workload_declaring_a_final_read_has_a_generator_that_makes_one():
    declared = {name for name, w in WORKLOADS.items() if w.final_read}
    assert declared == {"queue"}
    for name, w in WORKLOADS.items():
        if w.make_generator is not None:
            gen = w.make_generator(TestConfig(workload=name, seed=1))
            assert isinstance(gen, FinalReads) == w.final_read, name

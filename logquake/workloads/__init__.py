"""Generators and Kafka client adapters (docs/architecture.md).

`QueueGenerator` (pure) decides what each worker does; a `Client` (confluent-kafka or
kafka-python adapter) does it; `make_generator` / `make_client` build both from a TestConfig.
Which workload a test runs, and how it is checked and described, is its `Workload` record in
`WORKLOADS` (registry.py), found by `get_workload`.
"""

from logquake.workloads.client import Client, KeyMap, Validated, WithTimeout, complete, seek_back
from logquake.workloads.generator import DRAIN, MAIN, Context, QueueGenerator, micro_f
from logquake.workloads.queue import make_client, make_generator, producer_settings
from logquake.workloads.registry import WORKLOADS, FinalReads, Generator, Workload, get_workload

__all__ = [
    "DRAIN",
    "MAIN",
    "WORKLOADS",
    "Client",
    "Context",
    "FinalReads",
    "Generator",
    "KeyMap",
    "QueueGenerator",
    "Validated",
    "WithTimeout",
    "Workload",
    "complete",
    "get_workload",
    "make_client",
    "make_generator",
    "micro_f",
    "producer_settings",
    "seek_back",
]

"""Generators and Kafka client adapters (DESIGN.md §6).

`QueueGenerator` (pure) decides what each worker does; a `Client` (confluent-kafka or
kafka-python adapter) does it; `make_generator` / `make_client` build both from a TestConfig.
"""

from logquake.workloads.client import Client, KeyMap, Validated, WithTimeout, complete, seek_back
from logquake.workloads.generator import DRAIN, MAIN, Context, QueueGenerator, micro_f
from logquake.workloads.queue import make_client, make_generator, producer_settings

__all__ = [
    "DRAIN",
    "MAIN",
    "Client",
    "Context",
    "KeyMap",
    "QueueGenerator",
    "Validated",
    "WithTimeout",
    "complete",
    "make_client",
    "make_generator",
    "micro_f",
    "producer_settings",
    "seek_back",
]

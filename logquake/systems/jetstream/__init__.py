"""NATS JetStream as a system under test: its nodes (server.py) and its queue client (client.py)."""

from logquake.systems.jetstream.client import JetStreamClient, stream_name, subject
from logquake.systems.jetstream.server import (
    JetStreamLifecycle,
    JetStreamSettings,
    find_binary,
    parse_settings,
    server_version,
)
from logquake.systems.jetstream.system import JETSTREAM

__all__ = [
    "JETSTREAM",
    "JetStreamClient",
    "JetStreamLifecycle",
    "JetStreamSettings",
    "find_binary",
    "parse_settings",
    "server_version",
    "stream_name",
    "subject",
]

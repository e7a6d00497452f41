"""NATS JetStream as a system under test: its nodes (server.py) and its queue client (client.py)."""

from logquake.systems.jetstream.server import (
    JetStreamLifecycle,
    JetStreamSettings,
    find_binary,
    parse_settings,
    server_version,
)

__all__ = ["JetStreamLifecycle", "JetStreamSettings", "find_binary", "parse_settings", "server_version"]

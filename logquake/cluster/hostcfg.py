"""The `hosts` key of a test config, checked: one frozen entry per node of a docker/ssh/external cluster.

    hosts:
      - {name: n1, type: ssh, address: 10.0.0.11, user: admin, key: ~/.ssh/id_ed25519, sudo: true}
      - {name: n2, type: docker, container: kafka-2, address: 172.20.0.3}

`type` defaults to the test's backend (ssh for `backend: ssh`). Every error names the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from logquake.errors import ConfigError

__all__ = ["HostEntry", "parse_hosts"]

_FIELDS = {"name", "type", "address", "port", "user", "key", "known_hosts", "accept_new_host_keys", "sudo",
           "python", "dir", "container", "pidfile", "start"}


@dataclass(frozen=True, kw_only=True)
class HostEntry:
    """One node: how to reach it (ssh or docker exec) and where the broker lives on it."""

    name: str
    type: str  # ssh | docker
    address: str  # what brokers and clients use to reach it
    port: int = 22
    user: str = "root"
    key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_keys: bool = False
    sudo: bool = False
    python: str = "python3"  # on the node, with logquake's dependencies installed
    dir: str = "/var/lib/logquake"
    container: str = ""  # docker: the container name (external clusters in containers)
    pidfile: str = ""  # external: the broker's pid file on the node (kill/pause faults)
    start: str = ""  # external: shell command that starts the broker again (after a kill)


def _entry(i: int, raw: Mapping[str, Any], default_type: str) -> HostEntry:
    where = f"hosts[{i}]"
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ConfigError(where, f"unknown keys {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_FIELDS))}")
    kind = raw.get("type", default_type)
    if kind not in ("ssh", "docker"):
        raise ConfigError(f"{where}.type", f"must be ssh or docker, got {kind!r}")
    values = {k: v for k, v in raw.items() if k != "type"}
    values.setdefault("name", f"n{i + 1}")
    if kind == "docker" and "container" not in values:
        raise ConfigError(f"{where}.container", "a docker host needs the container's name")
    if not isinstance(values.get("address"), str) or not values["address"]:
        raise ConfigError(f"{where}.address", f"expected the node's address, got {values.get('address')!r}")
    for key in ("port",):
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int)):
            raise ConfigError(f"{where}.{key}", f"expected an integer, got {values[key]!r}")
    for key in ("accept_new_host_keys", "sudo"):
        if key in values and not isinstance(values[key], bool):
            raise ConfigError(f"{where}.{key}", f"expected true or false, got {values[key]!r}")
    for key in ("key", "known_hosts"):
        if values.get(key):
            values[key] = os.path.expanduser(str(values[key]))
    return HostEntry(type=kind, **{k: (str(v) if isinstance(v, str) else v) for k, v in values.items()})


def parse_hosts(hosts: tuple[Mapping[str, Any], ...], default_type: str) -> list[HostEntry]:
    """Checked entries; names unique."""
    entries = [_entry(i, raw, default_type) for i, raw in enumerate(hosts)]
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError("hosts", f"node names must be unique, got {names}")
    return entries

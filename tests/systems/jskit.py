"""A JetStream cluster of real nats-server processes on 127.0.0.1, through JetStreamLifecycle."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from logquake.broker.localcluster import free_ports
from logquake.systems.base import NodeSpec
from logquake.systems.jetstream.server import JetStreamLifecycle, JetStreamSettings

from .localhost import LocalHost


def local_lifecycle(base: Path, *, n: int = 3, settings: JetStreamSettings | None = None,
                    lazyfs: bool = False) -> JetStreamLifecycle:
    """n nodes on loopback, each with its own free client, cluster and monitoring ports."""
    ports = free_ports(3 * n)
    specs = [NodeSpec(name=f"n{i + 1}", node_id=i + 1, address="127.0.0.1", client_port=ports[3 * i],
                      peer_port=ports[3 * i + 1], node_dir=str(base / f"n{i + 1}")) for i in range(n)]
    return JetStreamLifecycle(hosts={s.name: LocalHost(s.name) for s in specs}, specs=specs,
                              settings=settings or JetStreamSettings(),
                              monitor_ports={s.name: ports[3 * i + 2] for i, s in enumerate(specs)},
                              python=sys.executable, lazyfs=lazyfs)


@contextlib.contextmanager
def running(lc: JetStreamLifecycle, *, timeout: float = 30.0) -> Iterator[JetStreamLifecycle]:
    """Every node installed, started and ready; every server killed on the way out."""
    try:
        for s in lc.specs:
            lc.install(s.name)
            lc.start(s.name)
        lc.wait_ready(timeout=timeout)
        yield lc
    finally:
        for s in lc.specs:
            lc.kill(s.name)
            if lc.lazyfs:  # on this machine the FUSE mount is in everyone's mount namespace
                lc.hosts[s.name].exec(["fusermount3", "-u", s.path("data")])


def stream_leader(lc: JetStreamLifecycle, stream: str) -> str:
    """The node leading `stream`, as the first node's monitoring port reports it."""
    jsz = lc.monitoring(lc.specs[0].name, "jsz?streams=true")
    for account in jsz.get("account_details") or []:
        for st in account.get("stream_detail") or []:
            if st["name"] == stream:
                return st["cluster"]["leader"]
    raise LookupError(f"no stream {stream}")

"""A JetStream cluster of real nats-server processes on 127.0.0.1, through JetStreamLifecycle."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from logquake.broker.localcluster import free_ports
from logquake.cluster.lab import LocalHost
from logquake.cluster.shims import read_pid
from logquake.systems.base import NodeSpec
from logquake.systems.jetstream.server import JetStreamLifecycle, JetStreamSettings


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


def wait_ready(lc: JetStreamLifecycle, *, timeout: float = 30.0) -> None:
    """Until every node is ready (the lifecycle's not_ready), as a cluster's wait_ready does
    through the system record; these tests drive a lifecycle with no cluster around it."""
    deadline = time.monotonic() + timeout
    while reasons := {s.name: r for s in lc.specs if (r := lc.not_ready(s.name)) is not None}:
        assert time.monotonic() < deadline, f"not ready after {timeout:.0f} s: {reasons}"
        time.sleep(0.1)


@contextlib.contextmanager
def running(lc: JetStreamLifecycle, *, timeout: float = 30.0) -> Iterator[JetStreamLifecycle]:
    """Every node installed, started and ready; every server killed on the way out."""
    try:
        for s in lc.specs:
            lc.install(s.name)
            lc.start(s.name)
        wait_ready(lc, timeout=timeout)
        yield lc
    finally:
        for s in lc.specs:
            lc.kill(s.name)
            if lc.lazyfs:  # on this machine the FUSE mount is in everyone's mount namespace
                unmount_lazyfs(lc, s)


def unmount_lazyfs(lc: JetStreamLifecycle, spec: NodeSpec, *, attempts: int = 20) -> None:
    """Unmount a node's LazyFS and end its process. A mount can stay busy for a moment after its
    server died (the kernel still closing its files): retry, then detach it lazily, so a test
    never leaves a mount (and a live LazyFS process) behind its temporary directory."""
    host, mount = lc.hosts[spec.name], spec.path("data")
    for _ in range(attempts):
        if host.exec(["fusermount3", "-u", mount]).rc == 0 or not _mounted(mount):
            break
        time.sleep(0.1)
    else:
        host.exec(["fusermount3", "-u", "-z", mount])
    pid = read_pid(host, spec.path("lazyfs.pid"))
    if pid is not None:
        host.signal(pid, signal.SIGKILL)


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def stream_leader(lc: JetStreamLifecycle, stream: str) -> str:
    """The node leading `stream`, as the first node's monitoring port reports it."""
    jsz = lc.monitoring(lc.specs[0].name, "jsz?streams=true")
    for account in jsz.get("account_details") or []:
        for st in account.get("stream_detail") or []:
            if st["name"] == stream:
                return st["cluster"]["leader"]
    raise LookupError(f"no stream {stream}")

"""`open_cluster` for the docker, ssh and external backends (the lab has its own in cluster.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from logquake.cluster.cluster import Cluster
from logquake.cluster.host import Host
from logquake.cluster.hostcfg import HostEntry, parse_hosts
from logquake.cluster.lifecycle import NodeSpec, PidSignals
from logquake.cluster.remote import (
    RemoteCluster,
    RemoteState,
    detect_iptables,
    install_logquake,
    lifecycle_for,
)
from logquake.config import TestConfig
from logquake.errors import ConfigError

__all__ = ["ExternalCluster", "open_backend", "open_ssh", "open_external", "make_host"]


def open_backend(cfg: TestConfig, run_dir: Path, *, start: bool = True) -> Cluster:
    run_dir = Path(run_dir).resolve()
    (run_dir / "nodes").mkdir(parents=True, exist_ok=True)
    if cfg.backend == "ssh":
        return open_ssh(cfg, run_dir, start=start)
    if cfg.backend == "external":
        return open_external(cfg, run_dir)
    if cfg.backend == "docker":
        from logquake.cluster.docker import open_docker

        return open_docker(cfg, run_dir, start=start)
    raise ConfigError("backend", f"unknown backend {cfg.backend!r}")


def make_host(entry: HostEntry) -> Host:
    if entry.type == "ssh":
        from logquake.cluster.ssh import SshHost

        return SshHost(entry)
    from logquake.cluster.docker import DockerHost

    return DockerHost(entry.name, entry.container)


def _start(cluster: RemoteCluster) -> RemoteCluster:
    try:
        cluster.start_all()
    except BaseException:
        cluster.close()
        raise
    return cluster


def open_ssh(cfg: TestConfig, run_dir: Path, *, start: bool = True) -> RemoteCluster:
    """Upload logquake to every host of cfg.hosts and start a broker on each."""
    entries = parse_hosts(cfg.hosts, "ssh")
    if not entries:
        raise ConfigError("hosts", "the ssh backend needs hosts: [{address, user, key}, ...]")
    dirs = {e.dir for e in entries}
    if len(dirs) != 1:  # the lifecycle runs one interpreter path on every node
        raise ConfigError("hosts", f"every ssh host needs the same dir, got {sorted(dirs)}")
    base = dirs.pop()
    hosts = {e.name: make_host(e) for e in entries}
    specs = [NodeSpec(name=e.name, node_id=i, address=e.address, node_dir=f"{base}/{e.name}")
             for i, e in enumerate(entries, start=1)]
    cluster: RemoteCluster | None = None
    try:
        # One by one: on hosts sharing a filesystem the uploads would race.
        python = ""
        for e in entries:
            python = install_logquake(hosts[e.name], base, e.python)
        state = RemoteState(run_dir=str(run_dir), iptables=detect_iptables(hosts[entries[0].name]))
        cluster = RemoteCluster(state=state, hosts=hosts, lifecycle=lifecycle_for(cfg, hosts, specs, python))
        for n in cluster.nodes:
            cluster.lifecycle.install(n)
            cluster.lifecycle.wipe(n)  # a broker or data left by an earlier run on this machine
    except BaseException:
        for h in hosts.values():
            with contextlib.suppress(Exception):
                h.close()  # type: ignore[attr-defined]
        raise
    return _start(cluster) if start else cluster


class _ExternalLifecycle(PidSignals):
    """Kill, pause and restart brokers someone else runs: by their pid file and start command."""

    def __init__(self, hosts: dict[str, Host], entries: dict[str, HostEntry]) -> None:
        self.hosts, self.entries = hosts, entries
        self.specs: list[NodeSpec] = [NodeSpec(name=n, node_id=i, address=e.address)
                                      for i, (n, e) in enumerate(entries.items(), start=1)]
        self.lazyfs = False
        self.python = "python3"

    def spec(self, node: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == node)

    def pid(self, node: str) -> int | None:
        e = self.entries[node]
        if not e.pidfile:
            raise ConfigError(f"hosts.{node}.pidfile", "kill and pause faults need the broker's pid file")
        rc, out, _ = self.hosts[node].exec(["cat", e.pidfile], timeout=20)
        return int(out.strip()) if rc == 0 and out.strip().isdigit() else None

    def start(self, node: str) -> int:
        from logquake.cluster.host import run_checked

        if self.is_up(node):
            return self.pid(node) or 0
        e = self.entries[node]
        if not e.start:
            raise ConfigError(f"hosts.{node}.start", "restarting a killed broker needs a start command")
        run_checked(self.hosts[node], ["sh", "-c", e.start], timeout=60)
        return self.pid(node) or 0

    def logs(self, node: str) -> list[str]:
        return []

    def stop(self, node: str, *, timeout: float = 10.0) -> None:
        return None  # not ours to stop


EXTERNAL_FAULTS = ("partition", "packet-loss", "kill", "pause", "stale-leader")


def open_external(cfg: TestConfig, run_dir: Path) -> RemoteCluster:
    """A cluster someone else runs, given by bootstrap servers; faults through cfg.hosts, if any."""
    if not cfg.bootstrap_servers:
        raise ConfigError("bootstrap_servers", "the external backend needs bootstrap_servers: [host:port, ...]")
    entries = parse_hosts(cfg.hosts, "ssh")
    if cfg.nemesis and not entries:
        raise ConfigError("nemesis", f"faults {', '.join(cfg.nemesis)} need hosts to act through",
                          hint="name the brokers' machines under hosts (type ssh or docker), or drop nemesis")
    unsupported = [f for f in cfg.nemesis if f.partition(":")[0] not in EXTERNAL_FAULTS]
    if unsupported:
        raise ConfigError("nemesis", f"{', '.join(unsupported)} cannot act on an external cluster; "
                          f"allowed: {', '.join(EXTERNAL_FAULTS)}")
    hosts = {e.name: make_host(e) for e in entries}
    iptables = detect_iptables(next(iter(hosts.values()))) if hosts else "iptables"
    lifecycle = _ExternalLifecycle(hosts, {e.name: e for e in entries})
    return ExternalCluster(state=RemoteState(run_dir=str(run_dir), iptables=iptables), hosts=hosts,
                           lifecycle=lifecycle, bootstrap=",".join(cfg.bootstrap_servers))  # type: ignore[arg-type]


class ExternalCluster(RemoteCluster):
    """Brokers we neither start nor stop: ready when Metadata answers, no logs of ours to collect."""

    def __init__(self, *, bootstrap: str, **kw) -> None:
        super().__init__(stop_brokers=False, **kw)
        self.bootstrap_servers = bootstrap

    def wait_ready(self, timeout: float = 60.0) -> None:
        import time

        from logquake.cluster.cluster import _metadata
        from logquake.errors import HostError

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _metadata(self.bootstrap_servers, timeout=2.0).get("brokers"):
                return
            time.sleep(0.2)
        raise HostError("external", "wait_ready", -1, f"no broker at {self.bootstrap_servers} answered Metadata")

    def collect_logs(self, dest_dir: Path) -> None:
        return None

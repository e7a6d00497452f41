"""The backend registry: lab, docker, ssh and external, peers that each build hosts for a system.

A backend makes (or reaches) the hosts, builds the system's `NodeSpec`s on them, gives the
system's lifecycle the faults' `NodeNeeds` it can meet, and says how to tear down what it made.
`open_cluster` is the one entry point; nothing else chooses a backend by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from logquake.cluster.cluster import NodeCluster
from logquake.cluster.host import Host
from logquake.cluster.hostcfg import HostEntry, parse_hosts
from logquake.cluster.remote import detect_iptables, install_logquake
from logquake.config import TestConfig
from logquake.errors import ConfigError
from logquake.systems.base import NodeNeeds, NodeSetup, NodeSpec, System, get_system

__all__ = ["BACKENDS", "EXTERNAL_FAULTS", "Backend", "make_host", "open_cluster", "system_for"]

Opener = Callable[[TestConfig, Path, System, NodeNeeds, bool], NodeCluster]


@dataclass(frozen=True, kw_only=True)
class Backend:
    """How one backend opens a cluster, and the system it runs unless told otherwise."""

    name: str
    open: Opener
    default_system: str
    starts_nodes: bool = True  # False: the nodes run already and are only reached


def system_for(cfg: TestConfig) -> System:
    """The System cfg.backend runs for cfg.system: the system itself where the backend starts
    nodes, else the system that reaches its nodes (`System.reached_as`); ConfigError naming
    `backend` where there is none."""
    backend = BACKENDS.get(cfg.backend)
    if backend is None:
        raise ConfigError("backend", f"unknown backend {cfg.backend!r}; allowed: {', '.join(BACKENDS)}")
    system = get_system(cfg.system)
    if system.starts_nodes == backend.starts_nodes:
        return system
    if not backend.starts_nodes and system.reached_as is not None:
        return get_system(system.reached_as)
    raise ConfigError("backend", f"the {backend.name} backend cannot run system {system.name}: "
                      f"it {'starts' if backend.starts_nodes else 'only reaches'} nodes")


def open_cluster(cfg: TestConfig, run_dir: Path, *, system: System | None = None,
                 needs: NodeNeeds = NodeNeeds(), start: bool = True) -> NodeCluster:
    """The cluster of cfg.backend running `system`, its nodes given `needs` where the backend can.

    Everything the backend made is removed again if opening fails; otherwise by `close()`.
    """
    backend = BACKENDS.get(cfg.backend)
    if backend is None:
        raise ConfigError("backend", f"unknown backend {cfg.backend!r}; allowed: {', '.join(BACKENDS)}")
    system = system or get_system(backend.default_system)
    if system.starts_nodes != backend.starts_nodes:
        raise ConfigError("backend", f"the {backend.name} backend cannot run system {system.name}: "
                          f"it {'starts' if backend.starts_nodes else 'only reaches'} nodes")
    run_dir = Path(run_dir).resolve()
    (run_dir / "nodes").mkdir(parents=True, exist_ok=True)
    return backend.open(cfg, run_dir, system, needs, start)


def make_host(entry: HostEntry) -> Host:
    if entry.type == "ssh":
        from logquake.cluster.ssh import SshHost

        return SshHost(entry)
    from logquake.cluster.docker import DockerHost

    return DockerHost(entry.name, entry.container)


def _close_hosts(hosts: Mapping[str, Host]) -> Callable[[], None]:
    """The ssh hosts' connections closed (docker hosts hold none)."""

    def close() -> None:
        if not hosts:
            return
        from logquake.cluster.ssh import SshHost

        for h in hosts.values():
            if isinstance(h, SshHost):
                with contextlib.suppress(Exception):
                    h.close()

    return close


def _open_lab(cfg: TestConfig, run_dir: Path, system: System, needs: NodeNeeds, start: bool) -> NodeCluster:
    from logquake.cluster.lab import open_lab

    return open_lab(cfg, run_dir, system, needs, start=start)


def _open_docker(cfg: TestConfig, run_dir: Path, system: System, needs: NodeNeeds, start: bool) -> NodeCluster:
    from logquake.cluster.docker import open_docker

    return open_docker(cfg, run_dir, system, needs, start=start)


def _open_ssh(cfg: TestConfig, run_dir: Path, system: System, needs: NodeNeeds, start: bool) -> NodeCluster:
    """Upload logquake to every host of cfg.hosts and start the system on each."""
    entries = parse_hosts(cfg.hosts, "ssh")
    if not entries:
        raise ConfigError("hosts", "the ssh backend needs hosts: [{address, user, key}, ...]")
    dirs = {e.dir for e in entries}
    if len(dirs) != 1:  # the lifecycle runs one interpreter path on every node
        raise ConfigError("hosts", f"every ssh host needs the same dir, got {sorted(dirs)}")
    base = dirs.pop()
    hosts = {e.name: make_host(e) for e in entries}
    close_hosts = _close_hosts(hosts)
    specs = tuple(NodeSpec(name=e.name, node_id=i, address=e.address, node_dir=f"{base}/{e.name}",
                           client_port=system.client_port, peer_port=system.peer_port)
                  for i, e in enumerate(entries, start=1))
    needs = NodeNeeds(faketime=needs.faketime)  # no LazyFS on machines we do not own; corrupt-tail covers disk
    cluster: NodeCluster | None = None
    try:
        # One by one: on hosts sharing a filesystem the uploads would race.
        python = ""
        for e in entries:
            python = install_logquake(hosts[e.name], base, e.python)
        setup = NodeSetup(hosts=hosts, specs=specs, needs=needs, python=python, cfg=cfg)
        cluster = NodeCluster(system=system, hosts=hosts, lifecycle=system.make_lifecycle(setup), specs=specs,
                              needs=needs, bootstrap=system.bootstrap(specs, cfg), run_dir=str(run_dir),
                              python=python, iptables=detect_iptables(hosts[entries[0].name]), on_close=close_hosts)
        cluster.install_all()
        for n in cluster.nodes:
            cluster.lifecycle.wipe(n)  # a node or data left by an earlier run on this machine
        if start:
            cluster.start_all()
    except BaseException:
        if cluster is not None:
            cluster.close()
        else:
            close_hosts()
        raise
    return cluster


# Faults that act on nodes logquake did not start: no clock shim or data dir of ours there.
EXTERNAL_FAULTS = ("partition", "packet-loss", "kill", "pause", "stale-leader")


def _open_external(cfg: TestConfig, run_dir: Path, system: System, needs: NodeNeeds, start: bool) -> NodeCluster:
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
    specs = tuple(NodeSpec(name=e.name, node_id=i, address=e.address) for i, e in enumerate(entries, start=1))
    needs = NodeNeeds()
    setup = NodeSetup(hosts=hosts, specs=specs, needs=needs, python="python3", cfg=cfg)
    iptables = detect_iptables(next(iter(hosts.values()))) if hosts else "iptables"
    return NodeCluster(system=system, hosts=hosts, lifecycle=system.make_lifecycle(setup), specs=specs,
                       needs=needs, bootstrap=system.bootstrap(specs, cfg), run_dir=str(run_dir), python="python3",
                       iptables=iptables, on_close=_close_hosts(hosts))


BACKENDS: Mapping[str, Backend] = {
    b.name: b for b in (
        Backend(name="lab", open=_open_lab, default_system="kafka"),
        Backend(name="docker", open=_open_docker, default_system="kafka"),
        Backend(name="ssh", open=_open_ssh, default_system="kafka"),
        Backend(name="external", open=_open_external, default_system="kafka-external", starts_nodes=False),
    )
}

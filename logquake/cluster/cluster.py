"""A running cluster as the runner and the nemesis see it: the `Cluster` protocol and `NodeCluster`.

Every backend (lab, docker, ssh, external; backends.py) returns a `NodeCluster`: the nodes a
`System`'s lifecycle runs on over the backend's hosts, with the backend's own teardown. It is
a context manager whose exit always tears everything down, even after an exception.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from logquake.cluster.host import Host
from logquake.errors import HostError
from logquake.systems.base import NodeLifecycle, NodeNeeds, NodeSpec, System

__all__ = ["Cluster", "NodeCluster", "node_names"]

log = logging.getLogger(__name__)


def node_names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


class Cluster(Protocol):
    """The cluster under test: its nodes, how to reach them, and its teardown.

    Attributes are fixed once the cluster is open. No method records history, injects a
    fault or asks which system or backend it is: faults act through `hosts` and `lifecycle`,
    clients through `bootstrap_servers`.
    """

    nodes: Sequence[str]
    hosts: Mapping[str, Host]
    addresses: Mapping[str, str]  # node -> the address clients and peers reach it at
    lifecycle: NodeLifecycle
    needs: NodeNeeds  # what the nodes were given: the faults' needs this backend could meet
    bootstrap_servers: str  # how clients reach the cluster (the system's bootstrap string)
    harness_address: str  # where the nodes see the harness's clients; "" when unknown
    iptables: str  # the iptables flavour that works on the nodes
    python: str  # the interpreter that runs logquake's own tools on the nodes

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once the system serves clients; HostError naming what is not ready after timeout."""
        ...

    def leaders(self, *, timeout: float = 5.0) -> dict[str, str]:
        """{"topic/partition": node}; {} when unknown. Must not raise for a cluster under faults."""
        ...

    def collect_logs(self, dest_dir: Path) -> None:
        """Copy each node's logs to dest_dir/<node>/; missing files are skipped, never an error."""
        ...

    def close(self) -> None:
        """Stop what logquake started and remove what the backend made; idempotent, never raises."""
        ...


class NodeCluster:
    """A `Cluster` of nodes on one backend's hosts, each run by one system's lifecycle.

    `on_close` is the backend's teardown (remove the lab, the containers, close connections),
    run after the nodes stop; nodes of a system that logquake does not start are left running.
    """

    def __init__(self, *, system: System, hosts: Mapping[str, Host], lifecycle: NodeLifecycle,
                 specs: Sequence[NodeSpec], needs: NodeNeeds, bootstrap: str, run_dir: str, python: str,
                 iptables: str = "iptables", harness_address: str = "",
                 on_close: Callable[[], None] = lambda: None) -> None:
        self.system = system
        self.hosts = dict(hosts)
        self.lifecycle = lifecycle
        self.specs = tuple(specs)
        self.nodes: list[str] = [s.name for s in specs]
        self.addresses: dict[str, str] = {s.name: s.address for s in specs}
        self.needs = needs
        self.bootstrap_servers = bootstrap
        self.run_dir = run_dir
        self.python = python
        self.iptables = iptables
        self.harness_address = harness_address
        self._on_close = on_close
        self._closed = False

    def __enter__(self) -> NodeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def install_all(self) -> None:
        for node in self.nodes:
            self.lifecycle.install(node)

    def start_all(self) -> None:
        if self.nodes:
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(self.lifecycle.start, self.nodes))

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        waiting = self.system.not_ready(self.bootstrap_servers, self.specs)
        while waiting and time.monotonic() < deadline:
            time.sleep(0.05)
            waiting = self.system.not_ready(self.bootstrap_servers, self.specs)
        if waiting:
            where = f"; node logs are in {self.run_dir}/nodes" if self.system.starts_nodes else ""
            raise HostError(",".join(waiting), "wait_ready", -1,
                            f"{self.system.name} at {self.bootstrap_servers} not ready after {timeout:.0f} s{where}")

    def leaders(self, *, timeout: float = 5.0) -> dict[str, str]:
        return self.system.leaders(self.bootstrap_servers, {s.node_id: s.name for s in self.specs}, timeout)

    def collect_logs(self, dest_dir: Path) -> None:
        for node in self.nodes:
            for remote in self.lifecycle.logs(node):
                with contextlib.suppress(OSError):
                    self.hosts[node].get(remote, str(Path(dest_dir) / node / Path(remote).name))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.system.starts_nodes and self.nodes:
            def stop(node: str) -> None:
                try:
                    self.lifecycle.stop(node, timeout=5.0)
                except Exception as e:  # the other nodes and the teardown below must still run
                    log.warning("stopping %s failed: %s", node, e)

            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(stop, self.nodes))
        try:
            self._on_close()
        except Exception as e:
            log.warning("teardown failed: %s", e)

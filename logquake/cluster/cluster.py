"""A running cluster as the runner sees it: nodes, bootstrap servers, broker lifecycle, teardown.

`open_cluster(cfg, run_dir)` builds the hosts of `cfg.backend` (lab here; the others in backends.py), installs
and starts a broker on each, and returns a `Cluster`, a context manager whose exit always
tears everything down, even after an exception.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logquake.cluster.host import Host
from logquake.cluster.lab import create_lab, lab_hosts, stop_lab
from logquake.cluster.lifecycle import BrokerLifecycle, NodeSpec
from logquake.cluster.state import LabState
from logquake.config import TestConfig
from logquake.errors import ConfigError

__all__ = ["Cluster", "open_cluster", "attach_cluster", "node_names", "partition_leaders"]

log = logging.getLogger(__name__)


def node_names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


class Cluster:
    """Nodes n1..nN with a broker each. `close()` is idempotent and never raises."""

    def __init__(self, *, state: LabState, hosts: Mapping[str, Host], lifecycle: BrokerLifecycle) -> None:
        self.state = state
        self.hosts = dict(hosts)
        self.lifecycle = lifecycle
        self.nodes: list[str] = [s.name for s in lifecycle.specs]
        self.addresses: dict[str, str] = {s.name: s.address for s in lifecycle.specs}
        self.bootstrap_servers: str = ",".join(f"{s.address}:{s.kafka_port}" for s in lifecycle.specs)
        self.harness_address: str = state.harness_addr
        self._closed = False

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_all(self) -> None:
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(self.lifecycle.start, self.nodes))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every broker accepts connections and Metadata lists them all."""
        from logquake.errors import HostError

        deadline = time.monotonic() + timeout
        waiting = list(self.nodes)
        while waiting and time.monotonic() < deadline:
            waiting = [n for n in waiting if not _port_open(self.addresses[n], self.lifecycle.spec(n).kafka_port)]
            if waiting:
                time.sleep(0.05)
        if not waiting:
            while time.monotonic() < deadline:
                if len(_metadata(self.bootstrap_servers, timeout=2.0).get("brokers", ())) >= len(self.nodes):
                    return
                time.sleep(0.1)
        down = waiting or ["metadata"]
        raise HostError(",".join(down), "wait_ready", -1,
                        f"cluster not ready after {timeout:.0f} s; broker logs are in {self.state.run_dir}/nodes")

    def leaders(self, *, timeout: float = 5.0) -> dict[str, str]:
        """{"topic/partition": node} from a Metadata request; {} when no broker answers."""
        return partition_leaders(self.bootstrap_servers, dict(zip(self._node_ids(), self.nodes, strict=True)),
                                 timeout=timeout)

    def _node_ids(self) -> list[int]:
        return [s.node_id for s in self.lifecycle.specs]

    def collect_logs(self, dest_dir: Path) -> None:
        """Copy each node's logs to dest_dir/<node>/ (missing files are skipped)."""
        for node in self.nodes:
            for remote in self.lifecycle.logs(node):
                with contextlib.suppress(OSError):
                    self.hosts[node].get(remote, str(Path(dest_dir) / node / Path(remote).name))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(lambda n: self.lifecycle.stop(n, timeout=5.0), self.nodes))
        except Exception as e:  # teardown below must run whatever happened
            log.warning("stopping brokers failed: %s", e)
        problems = stop_lab(self.state)
        if problems:
            log.warning("lab teardown left: %s", "; ".join(problems))


def _port_open(addr: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((addr, port), timeout=0.5):
        return True
    return False


def _metadata(bootstrap: str, *, timeout: float) -> dict:
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": logging.getLogger("rdkafka")})
        md = admin.list_topics(timeout=timeout)
    except Exception:  # the broker not (yet) answering is a state, not an error
        return {}
    return {"brokers": md.brokers, "topics": md.topics}


def partition_leaders(bootstrap: str, names: Mapping[int, str], *, timeout: float = 5.0) -> dict[str, str]:
    md = _metadata(bootstrap, timeout=timeout)
    out = {}
    for topic, t in sorted(md.get("topics", {}).items()):
        for pid, p in sorted(t.partitions.items()):
            if p.leader in names:
                out[f"{topic}/{pid}"] = names[p.leader]
    return out


def _specs(state: LabState, run_dir: Path) -> list[NodeSpec]:
    return [NodeSpec(name=n, node_id=i, address=state.addresses[n], node_dir=str(run_dir / "nodes" / n))
            for i, n in enumerate(state.holders, start=1)]


def _lifecycle(cfg: TestConfig, state: LabState, run_dir: Path, hosts: Mapping[str, Host]) -> BrokerLifecycle:
    broker = dict(cfg.broker)
    broker.setdefault("default_replication_factor", min(cfg.replication_factor, cfg.nodes))
    broker.setdefault("default_partitions", cfg.partitions)
    families = {f.partition(":")[0] for f in cfg.nemesis}  # "disk:power-loss" needs LazyFS like "disk"
    return BrokerLifecycle(hosts=hosts, specs=_specs(state, run_dir), python=sys.executable, broker=broker,
                           faketime="clock" in families, lazyfs="disk" in families and fuse_usable())


def fuse_usable() -> bool:
    """LazyFS needs /dev/fuse: root has it; inside an unprivileged user namespace it is not ours to open."""
    usable = os.access("/dev/fuse", os.R_OK | os.W_OK) and bool(shutil.which("fusermount3") or os.geteuid() == 0)
    if not usable:
        log.warning("no usable /dev/fuse: disk faults limited to corrupt-tail (lose-unfsynced needs FUSE)")
    return usable


def open_cluster(cfg: TestConfig, run_dir: Path, *, start: bool = True) -> Cluster:
    """Bring up cfg.nodes lab nodes under run_dir/nodes/ and start a broker on each."""
    if cfg.backend != "lab":  # docker, ssh, external: logquake/cluster/backends.py
        from logquake.cluster.backends import open_backend

        return open_backend(cfg, run_dir, start=start)
    if cfg.nodes < 1:
        raise ConfigError("nodes", f"must be at least 1, got {cfg.nodes}")
    run_dir = Path(run_dir).resolve()
    (run_dir / "nodes").mkdir(parents=True, exist_ok=True)
    state = create_lab(node_names(cfg.nodes), run_dir)
    try:
        hosts = lab_hosts(state)
        lifecycle = _lifecycle(cfg, state, run_dir, hosts)
        cluster = Cluster(state=state, hosts=hosts, lifecycle=lifecycle)
        for n in cluster.nodes:
            lifecycle.install(n)
        if start:
            cluster.start_all()
    except BaseException:
        stop_lab(state)
        raise
    return cluster


def attach_cluster(state: LabState, cfg: TestConfig | None = None) -> Cluster:
    """A Cluster object for a lab that is already up (for `logquake cluster status`)."""
    cfg = cfg or TestConfig(nodes=len(state.holders))
    run_dir = Path(state.run_dir)
    hosts = lab_hosts(state)
    return Cluster(state=state, hosts=hosts, lifecycle=_lifecycle(cfg, state, run_dir, hosts))

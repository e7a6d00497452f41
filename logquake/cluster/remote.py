"""Clusters on hosts logquake did not build itself: ssh machines, docker containers, external brokers.

`RemoteCluster` is the lab's `Cluster` over other hosts: same lifecycle, same faults, its own
teardown (stop the brokers, then whatever the backend made). `install_logquake` ships the
broker to an ssh node as Jepsen ships a database: a tarball of this package, unpacked into the
node's directory and run by a small wrapper with the node's own Python.
"""

from __future__ import annotations

import io
import logging
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import logquake
from logquake.cluster.cluster import Cluster
from logquake.cluster.host import Host, run_checked
from logquake.cluster.lifecycle import FAKETIME_SITE, BrokerLifecycle, NodeSpec
from logquake.config import TestConfig

__all__ = ["RemoteState", "RemoteCluster", "lifecycle_for", "install_logquake", "detect_iptables"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RemoteState:
    """What the nemesis and error messages read from `cluster.state` (the lab's LabState has more)."""

    run_dir: str
    iptables: str = "iptables"
    harness_addr: str = ""  # the address nodes see the harness at; "" when unknown


class RemoteCluster(Cluster):
    """A Cluster whose teardown is `on_close` (remove containers, close connections) after the brokers stop."""

    def __init__(self, *, state: RemoteState, hosts: Mapping[str, Host], lifecycle: BrokerLifecycle,
                 on_close: Callable[[], None] = lambda: None, stop_brokers: bool = True) -> None:
        super().__init__(state=state, hosts=hosts, lifecycle=lifecycle)  # type: ignore[arg-type]
        self._on_close = on_close
        self._stop_brokers = stop_brokers

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._stop_brokers:
            for node in self.nodes:
                try:
                    self.lifecycle.stop(node, timeout=5.0)
                except Exception as e:  # the backend's teardown below must still run
                    log.warning("stopping the broker on %s failed: %s", node, e)
        for host in self.hosts.values():
            close = getattr(host, "close", None)
            if close is not None:
                close()
        try:
            self._on_close()
        except Exception as e:
            log.warning("teardown failed: %s", e)


def lifecycle_for(cfg: TestConfig, hosts: Mapping[str, Host], specs: Sequence[NodeSpec], python: str) -> BrokerLifecycle:
    """`python` is the harness's own interpreter (docker: the harness tree is mounted at the same
    paths, so is the clock shim) or install_logquake's wrapper (ssh), which puts the uploaded
    copy's shim on the path itself."""
    broker = dict(cfg.broker)
    broker.setdefault("default_replication_factor", min(cfg.replication_factor, len(specs)))
    broker.setdefault("default_partitions", cfg.partitions)
    # LazyFS needs FUSE on the node; corrupt-tail covers disk faults everywhere.
    shim = FAKETIME_SITE if python == sys.executable else None
    return BrokerLifecycle(hosts=hosts, specs=list(specs), python=python, broker=broker,
                           faketime="clock" in cfg.nemesis, faketime_site=shim, lazyfs=False)


def detect_iptables(host: Host) -> str:
    """The first iptables flavour that works on the node (nft before legacy, as the lab)."""
    for tool in ("iptables-nft", "iptables", "iptables-legacy"):
        if host.exec([tool, "-w", "-S", "INPUT"], timeout=30).rc == 0:
            return tool
    return "iptables"


def _source_tarball() -> bytes:
    root = Path(logquake.__file__).parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(root, arcname="logquake", filter=lambda t: None if "__pycache__" in t.name else t)
    return buf.getvalue()


WRAPPER = """#!/bin/sh
# logquake as uploaded by the harness, run with this node's Python ({python}).
PKG={pkg}
# Under clock faults the shim goes in front of whatever PYTHONPATH the broker inherits.
if [ -n "$FAKETIME_TIMESTAMP_FILE" ]; then PYTHONPATH="$PKG/logquake/cluster/faketime_site${{PYTHONPATH:+:$PYTHONPATH}}"; fi
PYTHONPATH="$PKG${{PYTHONPATH:+:$PYTHONPATH}}" exec {python} "$@"
"""


def install_logquake(host: Host, node_dir: str, python: str) -> str:
    """Upload this logquake to node_dir/pkg; returns the wrapper to use as the broker's interpreter."""
    pkg = f"{node_dir}/pkg"
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "logquake.tar.gz"
        tarball.write_bytes(_source_tarball())
        host.put(str(tarball), f"{node_dir}/logquake.tar.gz")
        wrapper = Path(tmp) / "python"
        wrapper.write_text(WRAPPER.format(python=python, pkg=pkg))
        host.put(str(wrapper), f"{node_dir}/bin/python")
    run_checked(host, ["sh", "-c", 'rm -rf "$1" && mkdir -p "$1" && tar -xzf "$2" -C "$1" && chmod 755 "$3"',
                       "sh", pkg, f"{node_dir}/logquake.tar.gz", f"{node_dir}/bin/python"], timeout=120)
    rc, out, err = host.exec([f"{node_dir}/bin/python", "-c", "import logquake.broker, yaml; print('ok')"], timeout=120)
    if rc != 0 or "ok" not in out:
        from logquake.errors import MissingPrerequisite

        raise MissingPrerequisite(f"{host.name}: {python} cannot run the uploaded broker: {err.strip()[-300:]}",
                                  hint="install python3 with logquake's dependencies on the node "
                                       "(or point hosts[].python at a venv that has them)")
    return f"{node_dir}/bin/python"

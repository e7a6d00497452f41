"""Kafka-protocol systems: the embedded broker (started on every node) and an external cluster (reached).

The broker's lifecycle is written once over the `Host` protocol, so the lab, docker and ssh
backends share it. Each node's directory holds:

    node.yaml      the broker config of /work/notes/interfaces.md
    data/          data_dir (a LazyFS mount over data.backing/ when a fault needs it)
    broker.log     log_file; broker.out gets its stdout/stderr
    broker.pid     the daemon's pid
    faketime.rc    the clock offset libfaketime reads on every call (when a fault needs it)
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import yaml

from logquake.cluster.host import Host, pid_alive, run_checked, wait_dead, wait_stopped
from logquake.cluster.hostcfg import HostEntry, parse_hosts
from logquake.cluster.shims import FAKETIME_SITE, faketime_env, mount_lazyfs, put_text, read_pid, set_clock
from logquake.errors import ConfigError
from logquake.systems.base import NodeNeeds, NodeSetup, NodeSpec, System, port_open

if TYPE_CHECKING:
    from logquake.config import TestConfig

log = logging.getLogger("logquake.systems.kafka")

__all__ = ["EXTERNAL_KAFKA", "KAFKA", "BrokerLifecycle", "ExternalLifecycle", "PidSignals", "partition_leaders"]


class PidSignals:
    """is_up, kill, pause and resume (`Kill`, `Pause`) of a process known by its pid (`self.pid(node)`).

    Shared by our own brokers (BrokerLifecycle) and brokers someone else runs (the external
    system), which differ only in where the pid comes from.
    """

    hosts: Mapping[str, Host]

    def pid(self, node: str) -> int | None:
        raise NotImplementedError

    def _running_pid(self, node: str) -> int | None:
        pid = self.pid(node)
        return pid if pid is not None and pid_alive(self.hosts[node], pid) else None

    def is_up(self, node: str) -> bool:
        """The broker process exists and is not a zombie (a paused one is up)."""
        return self._running_pid(node) is not None

    def kill(self, node: str) -> bool:
        """SIGKILL the broker and wait until it is gone; False when it was not running."""
        pid = self._running_pid(node)
        if pid is None:
            return False
        self.hosts[node].signal(pid, signal.SIGKILL)
        wait_dead(self.hosts[node], pid)
        return True

    def pause(self, node: str) -> bool:
        """SIGSTOP the broker and wait until it has stopped (wait_stopped); False when it was not running."""
        pid = self._running_pid(node)
        if pid is not None:
            self.hosts[node].signal(pid, signal.SIGSTOP)
            if not wait_stopped(self.hosts[node], pid):
                log.warning("%s: pid %d not stopped yet, 5 s after its SIGSTOP (a thread in I/O?)", node, pid)
        return pid is not None

    def resume(self, node: str) -> bool:
        # Any pid, even a dead one's: SIGCONT is harmless and a paused zombie must not stay stopped.
        pid = self.pid(node)
        if pid is not None:
            self.hosts[node].signal(pid, signal.SIGCONT)
        return pid is not None


@dataclass(kw_only=True)
class BrokerLifecycle(PidSignals):
    """Starts and stops `logquake broker` processes on hosts (a NodeLifecycle with Kill and Pause).

    `needs.faketime` starts each broker under the node's clock offset file; `needs.lazyfs`
    mounts each data_dir on LazyFS before the broker starts (cluster/shims.py).
    """

    hosts: Mapping[str, Host]
    specs: Sequence[NodeSpec]
    python: str
    broker: Mapping[str, Any] = field(default_factory=dict)
    needs: NodeNeeds = NodeNeeds()
    # Where the clock faults' sitecustomize shim is on the nodes; None when the node's
    # interpreter puts it on its path itself (the ssh backend's wrapper, an uploaded copy).
    faketime_site: str | None = FAKETIME_SITE

    def spec(self, node: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == node)

    def node_config(self, node: str) -> dict[str, Any]:
        s = self.spec(node)
        cfg: dict[str, Any] = {
            "node_id": s.node_id,
            "data_dir": s.data_dir,
            "log_file": s.path("broker.log"),
            "fsync": "always",
            "default_partitions": 1,
            "default_replication_factor": min(3, len(self.specs)),
            "auto_create_topics": True,
            "unsafe": {},
        }
        cfg.update(self.broker)
        cfg["nodes"] = [{"node_id": o.node_id, "host": o.address, "kafka_port": o.client_port,
                         "raft_port": o.peer_port} for o in self.specs]
        return cfg

    def install(self, node: str) -> None:
        """Write node.yaml and make the directories (the broker is installed with logquake itself)."""
        s, host = self.spec(node), self.hosts[node]
        run_checked(host, ["mkdir", "-p", s.data_dir, s.path("data.backing")])
        put_text(host, s.path("node.yaml"), yaml.safe_dump(self.node_config(node), sort_keys=False))
        if self.needs.faketime:
            set_clock(host, s, 0.0)

    def pid(self, node: str, leaf: str = "broker.pid") -> int | None:
        return read_pid(self.hosts[node], self.spec(node).path(leaf))

    def start(self, node: str) -> int:
        """Start the broker unless it runs already; returns its pid."""
        if (pid := self._running_pid(node)) is not None:
            return pid
        s, host = self.spec(node), self.hosts[node]
        if self.needs.lazyfs:
            mount_lazyfs(host, s, self.python)
        argv = [self.python, "-m", "logquake.broker", "--node-id", str(s.node_id), "--config", s.path("node.yaml")]
        env = faketime_env(s, self.faketime_site) if self.needs.faketime else {}
        return host.spawn(argv, pidfile=s.path("broker.pid"), logfile=s.path("broker.out"), env=env)

    def stop(self, node: str, *, timeout: float = 10.0) -> None:
        """SIGTERM (a clean stop), then SIGKILL after timeout."""
        pid = self._running_pid(node)
        if pid is None:
            return
        self.hosts[node].signal(pid, signal.SIGCONT)
        self.hosts[node].signal(pid, signal.SIGTERM)
        wait_dead(self.hosts[node], pid, timeout=timeout)

    def wipe(self, node: str) -> None:
        """Kill the broker and delete its data (through the node's own view of data_dir)."""
        self.kill(node)
        s = self.spec(node)
        run_checked(self.hosts[node], ["find", s.data_dir, "-mindepth", "1", "-delete"])

    def logs(self, node: str) -> list[str]:
        s = self.spec(node)
        return [s.path("broker.out"), s.path("broker.log"), s.path("node.yaml"), s.path("lazyfs.log")]


class ExternalLifecycle(PidSignals):
    """Kill, pause and restart brokers someone else runs: by their pid file and start command."""

    def __init__(self, hosts: Mapping[str, Host], entries: Mapping[str, HostEntry],
                 specs: Sequence[NodeSpec]) -> None:
        self.hosts, self.entries, self.specs = hosts, entries, list(specs)

    def spec(self, node: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == node)

    def pid(self, node: str) -> int | None:
        e = self.entries[node]
        if not e.pidfile:
            raise ConfigError(f"hosts.{node}.pidfile", "kill and pause faults need the broker's pid file")
        rc, out, _ = self.hosts[node].exec(["cat", e.pidfile], timeout=20)
        return int(out.strip()) if rc == 0 and out.strip().isdigit() else None

    def install(self, node: str) -> None:
        return None  # not ours to configure

    def start(self, node: str) -> int:
        if self.is_up(node):
            return self.pid(node) or 0
        e = self.entries[node]
        if not e.start:
            raise ConfigError(f"hosts.{node}.start", "restarting a killed broker needs a start command")
        run_checked(self.hosts[node], ["sh", "-c", e.start], timeout=60)
        return self.pid(node) or 0

    def stop(self, node: str, *, timeout: float = 10.0) -> None:
        return None  # not ours to stop

    def wipe(self, node: str) -> None:
        raise ConfigError("backend", "an external cluster's data is not ours to wipe")

    def logs(self, node: str) -> list[str]:
        return []


# -- what ready means, how clients reach it, who leads ---------------------------------------


def _metadata(bootstrap: str, *, timeout: float) -> dict:
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": logging.getLogger("rdkafka")})
        md = admin.list_topics(timeout=timeout)
    except Exception:  # the broker not (yet) answering is a state, not an error
        return {}
    return {"brokers": md.brokers, "topics": md.topics}


def partition_leaders(bootstrap: str, names: Mapping[int, str], timeout: float = 5.0) -> dict[str, str]:
    """{"topic/partition": node} from a Metadata request; {} when no broker answers."""
    md = _metadata(bootstrap, timeout=timeout)
    out = {}
    for topic, t in sorted(md.get("topics", {}).items()):
        for pid, p in sorted(t.partitions.items()):
            if p.leader in names:
                out[f"{topic}/{pid}"] = names[p.leader]
    return out


def _brokers_not_ready(bootstrap: str, specs: Sequence[NodeSpec]) -> list[str]:
    """Every broker accepts connections, then Metadata lists them all."""
    waiting = [s.name for s in specs if not port_open(s.address, s.client_port)]
    if waiting:
        return waiting
    return [] if len(_metadata(bootstrap, timeout=2.0).get("brokers", ())) >= len(specs) else ["metadata"]


def _external_not_ready(bootstrap: str, specs: Sequence[NodeSpec]) -> list[str]:
    """Some broker answers Metadata: how many there are is not ours to know."""
    return [] if _metadata(bootstrap, timeout=2.0).get("brokers") else ["metadata"]


def _make_broker_lifecycle(setup: NodeSetup) -> BrokerLifecycle:
    cfg = setup.cfg
    broker = dict(cfg.broker)
    broker.setdefault("default_replication_factor", min(cfg.replication_factor, len(setup.specs)))
    broker.setdefault("default_partitions", cfg.partitions)
    # The harness's own interpreter (lab, docker: the harness tree is mounted at the same
    # paths, so is the clock shim) or install_logquake's wrapper (ssh), which puts the
    # uploaded copy's shim on the path itself.
    shim = FAKETIME_SITE if setup.python == sys.executable else None
    return BrokerLifecycle(hosts=setup.hosts, specs=setup.specs, python=setup.python, broker=broker,
                           needs=setup.needs, faketime_site=shim)


def _make_external_lifecycle(setup: NodeSetup) -> ExternalLifecycle:
    entries = {e.name: e for e in parse_hosts(setup.cfg.hosts, "ssh")}
    return ExternalLifecycle(setup.hosts, entries, setup.specs)


def _bootstrap(specs: Sequence[NodeSpec], cfg: TestConfig) -> str:
    return ",".join(f"{s.address}:{s.client_port}" for s in specs)


def _external_bootstrap(specs: Sequence[NodeSpec], cfg: TestConfig) -> str:
    return ",".join(cfg.bootstrap_servers)


KAFKA = System(
    name="kafka",
    description="logquake's embedded Kafka-compatible broker (Raft per partition), one per node",
    features=frozenset({"transactions", "consumer-groups", "dedup"}),
    clients=("confluent", "kafka-python"),
    workloads=("queue", "pipeline", "offsets"),
    make_lifecycle=_make_broker_lifecycle,
    bootstrap=_bootstrap,
    not_ready=_brokers_not_ready,
    leaders=partition_leaders,
    reached_as="kafka-external",
    settings_key="broker",
    # The Raft log segments of every group (groups/<group>/<first index>.seg), not hardstate.
    data_files=("**/*.seg",),
)

# The same clients, workloads and features, on brokers someone else runs.
EXTERNAL_KAFKA = replace(
    KAFKA,
    name="kafka-external",
    description="a Kafka-protocol cluster someone else runs, reached by bootstrap_servers",
    make_lifecycle=_make_external_lifecycle,
    bootstrap=_external_bootstrap,
    not_ready=_external_not_ready,
    starts_nodes=False,
    reached_as=None,
    data_files=(),  # its layout is whatever that cluster runs; no disk fault reaches it
)

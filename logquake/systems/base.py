"""The system seam: what a system under test provides, as Jepsen's DB protocols do (docs/architecture.md).

A `System` is a frozen record: its features, the client adapters and workloads it offers, a
factory for its `NodeLifecycle` on given hosts, what "ready" means and how clients reach it.
`NodeLifecycle` is what every system does to a node; `Kill` and `Pause` are optional
capabilities, checked with isinstance where a caller can do without them. Faults never ask
which system they drive: they act through these protocols and the `Host` a node runs on, and
declare what they need from a node as `NodeNeeds`, whose union the system's lifecycle receives.

Nothing here imports a backend or a system: systems register by module path in `SYSTEMS` and
are imported on first use, so a system's dependencies load only when it is tested.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from logquake.cluster.host import Host
    from logquake.config import TestConfig

__all__ = ["FEATURES", "NODE_READS", "SYSTEMS", "Kill", "NodeLifecycle", "NodeNeeds", "NodeSetup", "NodeSpec",
           "Pause", "System", "get_system", "port_open"]

FEATURES = frozenset({"transactions", "consumer-groups", "dedup", "kv"})
#: What `System.unavailable` is asked besides FEATURES: the drain's reads from each node.
NODE_READS = "node-reads"


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """Where one node lives and listens; the system decides what runs there."""

    name: str
    node_id: int
    address: str
    client_port: int = 9092  # what clients connect to
    peer_port: int = 9093  # what the nodes replicate over
    node_dir: str = ""  # the node's files on its host: config, data, logs, pid files

    def path(self, leaf: str) -> str:
        return f"{self.node_dir}/{leaf}"

    @property
    def data_dir(self) -> str:
        """Where the system keeps its data: LazyFS mounts it, disk faults damage what is in it."""
        return self.path("data")


@dataclass(frozen=True, kw_only=True)
class NodeNeeds:
    """What faults need from every node, provided by the system's lifecycle when it starts one.

    faketime: the node's wall clock can be shifted (libfaketime, an offset file in node_dir).
    lazyfs: the node's data dir sits on a FUSE layer that can lose unfsynced writes.
    Each costs something on every call of the node, so a need is on only when a fault asks.
    """

    faketime: bool = False
    lazyfs: bool = False

    def __or__(self, other: NodeNeeds) -> NodeNeeds:
        return NodeNeeds(faketime=self.faketime or other.faketime, lazyfs=self.lazyfs or other.lazyfs)

    @staticmethod
    def union(needs: Iterable[NodeNeeds]) -> NodeNeeds:
        out = NodeNeeds()
        for n in needs:
            out |= n
        return out


@dataclass(frozen=True, kw_only=True)
class NodeSetup:
    """Everything a system's lifecycle factory is given by the backend that built the hosts."""

    hosts: Mapping[str, Host]
    specs: tuple[NodeSpec, ...]
    needs: NodeNeeds  # what the nodes must provide: the faults' needs the backend can meet
    python: str  # the interpreter running logquake's own code on the nodes (LazyFS, disk tools)
    cfg: TestConfig  # the system reads its own keys (broker:, replication_factor, ...)


class NodeLifecycle(Protocol):
    """What a system does to one node (Jepsen's DB): every method takes the node's name.

    Implementations act only through the node's `Host`; none of them may touch the network
    rules, another node, or the history. Each is idempotent where the docstring says so, as
    the nemesis's heal calls them without knowing the node's state.
    """

    def install(self, node: str) -> None:
        """Write the node's configuration and directories. Must not start anything."""
        ...

    def start(self, node: str) -> object:
        """Start the node's process unless it runs already (idempotent). Must not wipe data."""
        ...

    def stop(self, node: str, *, timeout: float = 10.0) -> None:
        """Stop the node cleanly, forcibly after timeout; a stopped node is not an error."""
        ...

    def wipe(self, node: str) -> None:
        """Stop the node at once and delete its data, leaving its configuration in place."""
        ...

    def logs(self, node: str) -> list[str]:
        """Paths on the node's host of its log files, the process's own output first; may not exist."""
        ...

    def spec(self, node: str) -> NodeSpec:
        """Where the node lives and listens. Must not do I/O."""
        ...


@runtime_checkable
class Kill(Protocol):
    """Crash a node's process and tell whether it runs (Jepsen's Kill)."""

    def kill(self, node: str) -> bool:
        """SIGKILL the process and wait until it is gone; False when it was not running."""
        ...

    def is_up(self, node: str) -> bool:
        """The process exists and is not a zombie (a paused one is up). Must not change anything."""
        ...


@runtime_checkable
class Pause(Protocol):
    """Freeze a node's process and let it go on (Jepsen's Pause)."""

    def pause(self, node: str) -> bool:
        """SIGSTOP the process; False when it was not running."""
        ...

    def resume(self, node: str) -> bool:
        """SIGCONT the process, even a dead one's pid: a paused node must never stay stopped."""
        ...


@dataclass(frozen=True, kw_only=True)
class System:
    """A system under test: what it offers, how its nodes are made, what ready means.

    `make_lifecycle` builds the lifecycle for nodes a backend has made hosts for. `bootstrap`
    is how clients reach the cluster (a Kafka bootstrap string, a NATS server list).
    `not_ready` is one probe: [] when the cluster serves clients, else the nodes (or a word
    such as "metadata") still waited for. `leaders` maps "topic/partition" (or its
    equivalent) to the node leading it, {} when unknown; faults aim at leaders with it.
    `starts_nodes` is False for a cluster logquake only reaches: it is neither started,
    stopped nor wiped, and its logs are not ours; `reached_as` names the system that reaches
    this one's nodes where a backend only reaches (None: no such system).
    `data_files` are glob patterns, relative to a node's data dir, of the files that hold the
    system's data (log segments, message blocks): what a torn write at a crash damages, as
    opposed to indexes and metadata; () when they are not ours to know.

    What a test may ask of it is checked at config load: `max_partitions` per key (None: no
    limit), `unmet_needs` maps a `NodeNeeds` field the system cannot provide to why, so a
    fault needing it is refused; `check_config` raises ConfigError for the system's own keys
    (`settings_key`, e.g. `jetstream:`), and `describe` gives test.json's facts about the
    servers run (binary, version), stored as `server` beside the keys; {} for none.
    `unavailable(cfg, feature)`: why this test's servers cannot give one of `features`, or
    `NODE_READS` (`node_reads`), though the system has it (a version without it), None when
    they can. Config load asks it only of the features the test's workload uses
    (`Workload.needs`) and refuses naming the key that asked; the drain asks it of
    NODE_READS and skips those reads at once, saying why (results.json
    `drain.node_reads_skipped`): they are extra evidence, not needed for the verdict.
    `txn_writes_one_key`: a transaction can only be sends to one key (JetStream's atomic batch
    publishes to one stream), so the workload never puts a poll or a second key in one.
    `dedup_window`: None where dedup lives in a producer session (Kafka's idempotent producer:
    a restarted producer gets a new producer id and nothing it resends is deduplicated); else
    the system dedups a publish by a message id the client picks, and this gives, for a test,
    for how long (seconds) it remembers one. A restarted idempotent producer then resends its
    unsure sends (workloads/generator.py), and the checker tells duplicates a retry made within
    the window (bad) from those made after it (outside the promise).
    `shared_subscribe`: the queue workload's subscribe binds every worker to one server-side
    consumer that splits each key's values among them (JetStream's durable pull consumer),
    where a Kafka group gives each partition to one member: one poll's values of a key then
    have gaps and backward steps by design (logquake.guarantees.SHARED_CONSUMER_ALLOWS).
    `node_reads`: where the system's client can point a read at one node, the map from a
    bootstrap to each node it reaches, by name, and the bootstrap reaching that node alone;
    None where it cannot. The drain then makes its final read once more from each node
    (README.md's History format), so a node lacking acknowledged values shows up by name
    instead of being averaged away. A client opened on such a bootstrap reports only what
    that node answered itself: where it cannot be sure which node answered, the read does
    not complete (unknown for that node), never another node's answer. Kafka's is None: a
    fetch is served by the partition's leader whichever broker the client reaches (follower
    fetching needs rack-aware brokers this harness does not configure).
    """

    name: str
    description: str
    features: frozenset[str]
    clients: tuple[str, ...]
    workloads: tuple[str, ...]
    make_lifecycle: Callable[[NodeSetup], NodeLifecycle]
    bootstrap: Callable[[Sequence[NodeSpec], TestConfig], str]
    not_ready: Callable[[str, Sequence[NodeSpec]], list[str]]
    leaders: Callable[[str, Mapping[int, str], float], dict[str, str]]
    starts_nodes: bool = True
    reached_as: str | None = None
    client_port: int = 9092
    peer_port: int = 9093
    max_partitions: int | None = None
    unmet_needs: Mapping[str, str] = field(default_factory=dict)
    settings_key: str | None = None
    txn_writes_one_key: bool = False
    dedup_window: Callable[[TestConfig], float] | None = None
    check_config: Callable[[TestConfig], None] = lambda cfg: None
    unavailable: Callable[[TestConfig, str], str | None] = lambda cfg, feature: None
    describe: Callable[[TestConfig], dict[str, Any]] = lambda cfg: {}
    data_files: tuple[str, ...] = ()
    shared_subscribe: bool = False
    node_reads: Callable[[str], dict[str, str]] | None = None

    def __post_init__(self) -> None:
        unknown = self.features - FEATURES
        if unknown:
            raise ValueError(f"system {self.name}: unknown features {sorted(unknown)}; known: {sorted(FEATURES)}")
        needs = {f.name for f in fields(NodeNeeds)}
        if set(self.unmet_needs) - needs:
            raise ValueError(f"system {self.name}: unmet_needs names no NodeNeeds field: {sorted(self.unmet_needs)}")


# name -> "module:attribute" of its System record; imported on first use.
SYSTEMS: Mapping[str, str] = {
    "kafka": "logquake.systems.kafka:KAFKA",
    "kafka-external": "logquake.systems.kafka:EXTERNAL_KAFKA",
    "jetstream": "logquake.systems.jetstream:JETSTREAM",
}


def port_open(addr: str, port: int, *, timeout: float = 0.5) -> bool:
    """Does something accept TCP connections at addr:port (from this process's network)?"""
    with contextlib.suppress(OSError), socket.create_connection((addr, port), timeout=timeout):
        return True
    return False


def get_system(name: str) -> System:
    """The System registered as `name`; ConfigError naming `system` for an unknown one."""
    if name not in SYSTEMS:
        from logquake.errors import ConfigError

        raise ConfigError("system", f"unknown system {name!r}; allowed: {', '.join(SYSTEMS)}")
    module, _, attr = SYSTEMS[name].partition(":")
    system = getattr(importlib.import_module(module), attr)
    assert isinstance(system, System) and system.name == name, f"{SYSTEMS[name]} is not System {name!r}"
    return system

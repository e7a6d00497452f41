"""The broker's lifecycle on any Host: install, start, kill, pause, resume, wipe, logs, is_up.

Written once over the `Host` protocol (as Jepsen's DB protocols drive nodes through a shell),
so the lab, docker and ssh backends share it. Each node has a directory holding:

    node.yaml      the broker config of /work/notes/interfaces.md
    data/          data_dir (a LazyFS mount over data.backing/ when disk faults are on)
    broker.log     log_file; broker.out gets its stdout/stderr
    broker.pid     the daemon's pid
    faketime.rc    the clock offset libfaketime reads on every call (clock faults)
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from logquake.cluster.host import Host, pid_alive, run_checked, wait_dead

__all__ = ["NodeSpec", "BrokerLifecycle", "PidSignals", "LIBFAKETIME"]

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
FAKETIME_SITE = str(Path(__file__).with_name("faketime_site"))


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """Where one broker lives and listens."""

    name: str
    node_id: int
    address: str
    kafka_port: int = 9092
    raft_port: int = 9093
    node_dir: str = ""

    def path(self, leaf: str) -> str:
        return f"{self.node_dir}/{leaf}"


class PidSignals:
    """is_up, kill, pause and resume of a broker known by its pid (`self.pid(node)`).

    Shared by our own brokers (BrokerLifecycle) and brokers someone else runs (the external
    backend), which differ only in where the pid comes from.
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
        pid = self._running_pid(node)
        if pid is not None:
            self.hosts[node].signal(pid, signal.SIGSTOP)
        return pid is not None

    def resume(self, node: str) -> bool:
        # Any pid, even a dead one's: SIGCONT is harmless and a paused zombie must not stay stopped.
        pid = self.pid(node)
        if pid is not None:
            self.hosts[node].signal(pid, signal.SIGCONT)
        return pid is not None


@dataclass(kw_only=True)
class BrokerLifecycle(PidSignals):
    """Starts and stops `logquake broker` processes on hosts.

    `faketime` preloads libfaketime with a per-node offset file (clock faults); `lazyfs` puts
    each data_dir on a FUSE layer that can drop unsynced writes (disk faults). Both cost
    something on every call, so they are on only when those faults are asked for.
    """

    hosts: Mapping[str, Host]
    specs: Sequence[NodeSpec]
    python: str
    broker: Mapping[str, Any] = field(default_factory=dict)
    faketime: bool = False
    # Where the clock faults' sitecustomize shim is on the nodes; None when the node's
    # interpreter puts it on its path itself (the ssh backend's wrapper, an uploaded copy).
    faketime_site: str | None = FAKETIME_SITE
    lazyfs: bool = False

    def spec(self, node: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == node)

    def node_config(self, node: str) -> dict[str, Any]:
        s = self.spec(node)
        cfg: dict[str, Any] = {
            "node_id": s.node_id,
            "data_dir": s.path("data"),
            "log_file": s.path("broker.log"),
            "fsync": "always",
            "default_partitions": 1,
            "default_replication_factor": min(3, len(self.specs)),
            "auto_create_topics": True,
            "unsafe": {},
        }
        cfg.update(self.broker)
        cfg["nodes"] = [{"node_id": o.node_id, "host": o.address, "kafka_port": o.kafka_port,
                         "raft_port": o.raft_port} for o in self.specs]
        return cfg

    def _put_text(self, node: str, remote: str, text: str) -> None:
        with tempfile.NamedTemporaryFile("w", delete=False, suffix=".tmp") as f:
            f.write(text)
        try:
            self.hosts[node].put(f.name, remote)
        finally:
            os.unlink(f.name)

    def install(self, node: str) -> None:
        """Write node.yaml and make the directories (the broker is installed with logquake itself)."""
        s, host = self.spec(node), self.hosts[node]
        run_checked(host, ["mkdir", "-p", s.path("data"), s.path("data.backing")])
        self._put_text(node, s.path("node.yaml"), yaml.safe_dump(self.node_config(node), sort_keys=False))
        if self.faketime:
            self.set_clock(node, 0.0)

    def set_clock(self, node: str, offset_s: float) -> None:
        """Shift the node's wall clock by offset_s from now on (libfaketime re-reads the file)."""
        # Written aside and renamed: libfaketime re-reads the file on every call and must never
        # see it half-written (an empty file would mean true time for an instant).
        path = self.spec(node).path("faketime.rc")
        self._put_text(node, path + ".new", f"{offset_s:+.3f}\n")
        run_checked(self.hosts[node], ["mv", "-f", path + ".new", path])

    def _env(self, node: str) -> dict[str, str]:
        if not self.faketime:
            return {}
        # Only CLOCK_REALTIME is faked: a real clock fault (NTP step, bad RTC) never moves the
        # monotonic clock, and faking it would break the broker's timers in ways no real
        # deployment sees. FAKETIME_NO_CACHE makes every change visible on the next call
        # (~5 us per wall-clock read, no measurable cost to a broker).
        # libfaketime then breaks Python's time.sleep; FAKETIME_SITE's sitecustomize mends it.
        # FAKETIME_FORCE_MONOTONIC_FIX=0: libfaketime 0.9.10 turns that fix on by itself for this
        # glibc, and with it every hand-over of the GIL between threads (a timed wait on a
        # CLOCK_MONOTONIC condition variable) became ~50x slower: the clock cells ran 7-23
        # transactions per 30 s instead of ~800. Timed waits stay exact without it.
        env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": self.spec(node).path("faketime.rc"),
               "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0"}
        if self.faketime_site:
            # In front of the path the broker would have had, not instead of it: a harness run
            # from a snapshot (PYTHONPATH=/tmp/snap) must not get brokers of the editable install.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (self.faketime_site, os.environ.get("PYTHONPATH")) if p)
        return env

    def pid(self, node: str, leaf: str = "broker.pid") -> int | None:
        rc, out, _ = self.hosts[node].exec(["cat", self.spec(node).path(leaf)], timeout=20)
        try:
            return int(out.strip()) if rc == 0 else None
        except ValueError:
            return None

    def _alive(self, node: str, leaf: str) -> int | None:
        pid = self.pid(node, leaf)
        return pid if pid is not None and pid_alive(self.hosts[node], pid) else None

    def start(self, node: str) -> int:
        """Start the broker unless it runs already; returns its pid."""
        if (pid := self._alive(node, "broker.pid")) is not None:
            return pid
        if self.lazyfs:
            self._mount_lazyfs(node)
        s = self.spec(node)
        argv = [self.python, "-m", "logquake.broker", "--node-id", str(s.node_id), "--config", s.path("node.yaml")]
        return self.hosts[node].spawn(argv, pidfile=s.path("broker.pid"), logfile=s.path("broker.out"),
                                      env=self._env(node))

    def stop(self, node: str, *, timeout: float = 10.0) -> None:
        """SIGTERM (a clean stop), then SIGKILL after timeout."""
        pid = self._alive(node, "broker.pid")
        if pid is None:
            return
        self.hosts[node].signal(pid, signal.SIGCONT)
        self.hosts[node].signal(pid, signal.SIGTERM)
        wait_dead(self.hosts[node], pid, timeout=timeout)

    def wipe(self, node: str) -> None:
        """Kill the broker and delete its data (through the node's own view of data_dir)."""
        self.kill(node)
        s = self.spec(node)
        run_checked(self.hosts[node], ["find", s.path("data"), "-mindepth", "1", "-delete"])

    def logs(self, node: str) -> list[str]:
        s = self.spec(node)
        return [s.path("broker.log"), s.path("broker.out"), s.path("node.yaml"), s.path("lazyfs.log")]

    # -- LazyFS: data_dir on a FUSE layer that loses unsynced writes on demand ---------------

    def _mount_lazyfs(self, node: str) -> None:
        if self._alive(node, "lazyfs.pid") is not None:
            return
        s, host = self.spec(node), self.hosts[node]
        argv = [self.python, "-m", "logquake.nemesis.lazyfs", s.path("data.backing"), s.path("data")]
        host.spawn(argv, pidfile=s.path("lazyfs.pid"), logfile=s.path("lazyfs.log"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rc, _, _ = host.exec(["test", "-e", s.path("data") + "/.lazyfs"], timeout=20)
            if rc == 0:
                return
            if self._alive(node, "lazyfs.pid") is None:
                break
            time.sleep(0.05)
        rc, out, _ = host.exec(["tail", "-n", "5", s.path("lazyfs.log")])
        from logquake.errors import HostError

        raise HostError(node, "lazyfs mount", -1, out)

    def drop_unsynced(self, node: str) -> None:
        """Lose every write to data_dir that was not fsynced (as a power cut would)."""
        s = self.spec(node)
        run_checked(self.hosts[node], ["sh", "-c", "echo crash > \"$1\"", "sh", s.path("data") + "/.lazyfs"])

"""Helpers for tests that need real lab namespaces: skip reasons, simple real processes, probes."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logquake.cluster import LabHost, LabState, create_lab, lab_hosts, stop_lab
from logquake.cluster.lab import IPTABLES, TOOLS

PORT = 7000

LISTENER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(128)
    while True:
        c, _ = s.accept(); c.close()
""")

# Connects to every target concurrently; a link counts as up if any of `tries` attempts works.
PROBE = textwrap.dedent("""
    import json, socket, sys, threading
    targets, timeout, tries = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    out = {}
    def probe(name, addr, port):
        for _ in range(tries):
            try:
                socket.create_connection((addr, port), timeout=timeout).close()
                out[name] = True
                return
            except OSError:
                pass
        out[name] = False
    ts = [threading.Thread(target=probe, args=t) for t in targets]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(json.dumps(out))
""")


def lab_skip_reason() -> str | None:
    """Why lab tests cannot run here, or None."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if not any(shutil.which(t) for t in IPTABLES):
        missing.append("iptables")
    if missing:
        return f"lab needs {', '.join(missing)}"
    if os.geteuid() != 0:
        p = subprocess.run(["unshare", "-U", "-r", "-n", "true"], capture_output=True, text=True)
        if p.returncode != 0:
            return f"not root and the kernel refuses user namespaces: {p.stderr.strip()}"
    return None


def require_lab() -> None:
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)


@contextlib.contextmanager
def lab(n: int, base: Path) -> Iterator[tuple[LabState, dict[str, LabHost]]]:
    require_lab()
    state = create_lab([f"n{i}" for i in range(1, n + 1)], base)
    try:
        yield state, lab_hosts(state)
    finally:
        stop_lab(state)


def wait_until(cond: Callable[[], object], *, timeout: float = 30.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (its parent may not have reaped it yet)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2] != "Z"


def start_listeners(state: LabState, hosts: dict[str, LabHost], base: Path, port: int = PORT) -> None:
    base.mkdir(parents=True, exist_ok=True)
    script = base / "listener.py"
    script.write_text(LISTENER)
    for n, h in hosts.items():
        h.spawn([sys.executable, str(script), state.addresses[n], str(port)], pidfile=str(base / f"{n}.pid"),
                logfile=str(base / f"{n}.log"))
    probe = hosts[next(iter(hosts))]
    for n in hosts:  # from a node (the harness reaches them through its veth too, but a node is the point)
        wait_until(lambda n=n: probe.exec([sys.executable, "-c", PROBE, json.dumps([[n, state.addresses[n], port]]),
                                           "1", "1"]).out.strip() == json.dumps({n: True}),
                   what=f"listener on {n}")


def connect_matrix(state: LabState, hosts: dict[str, LabHost], port: int = PORT,
                   timeout: float = 1.0, tries: int = 2) -> set[frozenset[str]]:
    """Unordered node pairs that cannot open a TCP connection in at least one direction."""
    from concurrent.futures import ThreadPoolExecutor

    def row(src: str) -> dict[str, bool]:
        targets = [[d, state.addresses[d], port] for d in hosts if d != src]
        rc, out, err = hosts[src].exec([sys.executable, "-c", PROBE, json.dumps(targets), str(timeout), str(tries)],
                                       timeout=120)
        assert rc == 0, err
        return json.loads(out)

    with ThreadPoolExecutor(len(hosts)) as pool:
        rows = dict(zip(hosts, pool.map(row, hosts), strict=True))
    return {frozenset((a, b)) for a, b in itertools.permutations(hosts, 2) if not rows[a][b]}


FAKE_BROKER = Path(__file__).with_name("fake_broker.py")


def fake_python(base: Path) -> str:
    """An interpreter stand-in: `-m logquake.broker ...` runs fake_broker.py, anything else real python."""
    base.mkdir(parents=True, exist_ok=True)
    wrapper = base / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = logquake.broker ]; then shift 2; '
        f'exec {sys.executable} {FAKE_BROKER} "$@"; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


@contextlib.contextmanager
def fake_cluster(n: int, base: Path, *, faketime: bool = False, lazyfs: bool = False):
    """A real lab Cluster whose 'brokers' are fake_broker.py processes."""
    from logquake.cluster import LabCluster
    from logquake.systems import NodeNeeds, NodeSpec, get_system
    from logquake.systems.kafka import BrokerLifecycle

    require_lab()
    base = base.resolve()
    state = create_lab([f"n{i}" for i in range(1, n + 1)], base)
    try:
        hosts = lab_hosts(state)
        specs = tuple(NodeSpec(name=n, node_id=i, address=state.addresses[n], node_dir=str(base / "nodes" / n))
                      for i, n in enumerate(state.holders, start=1))
        needs = NodeNeeds(faketime=faketime, lazyfs=lazyfs)
        lc = BrokerLifecycle(hosts=hosts, specs=specs, python=fake_python(base / "bin"), needs=needs)
        cluster = LabCluster(state=state, system=get_system("kafka"), hosts=hosts, lifecycle=lc, specs=specs,
                             needs=needs, bootstrap="", python=lc.python)
        cluster.install_all()
        cluster.start_all()
        for node in cluster.nodes:
            wait_until(lambda node=node: Path(lc.spec(node).path("clock")).exists(), what=f"fake broker on {node}")
        yield cluster
    finally:
        stop_lab(state)


def fake_counter(cluster, node: str) -> int:
    text = Path(cluster.lifecycle.spec(node).path("clock")).read_text().split()
    return int(text[1])


def fake_clock(cluster, node: str) -> float:
    return float(Path(cluster.lifecycle.spec(node).path("clock")).read_text().split()[0])


def status_rows(out: str) -> dict[str, tuple[str, int | None, str]]:
    """{node: (address, pid, up)} from the table `logquake cluster status` prints."""
    import re

    rows = {}
    for line in out.splitlines():
        m = re.search(r"│\s*(n\d+)\s*│\s*(10\.77\.\d+\.\d+)\s*│\s*(\d+|-)\s*│\s*(yes|no)\s*│", line)
        if m:
            rows[m[1]] = (m[2], None if m[3] == "-" else int(m[3]), m[4])
    return rows

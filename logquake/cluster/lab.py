"""The `lab` backend: every node its own network namespace on a private bridge, on this machine.

Layout of one cluster (names unique per cluster, subnet 10.77.<k>.0/24 used nowhere else):

    harness netns ── veth lq<id> (10.77.k.254) ──┐
                                                  switch netns: bridge br0
    node netns n1 ── eth0 (10.77.k.11) ───────────┤   (held by a `sleep` process)
    node netns n2 ── eth0 (10.77.k.12) ───────────┘   ...

Each namespace is held by a `sleep infinity` process rather than bind-mounted under
/run/netns, so a namespace can never outlive its processes: when they die (cleanly, or killed
by `logquake cluster down` after a SIGKILLed harness), the kernel removes the bridge, the veths
(including the harness side) and the iptables chains with it. Node namespaces also get their
own mount namespace, so a FUSE data directory (disk faults) is private to its node.
Root builds this directly; anyone else first enters a private user+net+mount namespace.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from logquake.cluster.cluster import NodeCluster, node_names
from logquake.cluster.host import ExecResult, run_checked, spawn_script
from logquake.cluster.shims import fuse_usable
from logquake.cluster.state import LabState, destroy, load_states, proc_ref, state_dir, state_lock
from logquake.cluster.userns import enter_private_userns, in_private_userns, is_real_root, spawn_anchor
from logquake.config import TestConfig
from logquake.errors import ConfigError, HostError, MissingPrerequisite
from logquake.systems.base import NodeNeeds, NodeSetup, NodeSpec, System

__all__ = ["IPTABLES", "LabCluster", "LabHost", "LocalHost", "attach_lab", "check_lab_prerequisites", "create_lab",
           "lab_hosts", "open_lab", "prepare_lab", "stop_lab"]

log = logging.getLogger(__name__)

TOOLS = ("ip", "nsenter", "unshare", "setsid", "ps")
IPTABLES = ("iptables-nft", "iptables-legacy")  # nft first: legacy needs /run/xtables.lock, absent in a userns


class LabHost:
    """A node of the lab: commands run inside its network and mount namespaces via nsenter."""

    def __init__(self, name: str, holder_pid: int, *, iptables: str = "iptables-nft") -> None:
        self.name = name
        self.holder_pid = holder_pid
        self.iptables = iptables

    def _enter(self) -> list[str]:
        h = self.holder_pid
        return ["nsenter", f"--net=/proc/{h}/ns/net", f"--mount=/proc/{h}/ns/mnt", "--"]

    def exec(self, argv: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> ExecResult:
        env = dict(os.environ, XTABLES_LOCKFILE=str(state_dir() / "xtables.lock"))
        try:
            p = subprocess.run([*self._enter(), *map(str, argv)], capture_output=True, text=True,
                               timeout=timeout, input=input, env=env)
        except subprocess.TimeoutExpired as e:
            return ExecResult(124, _text(e.stdout), _text(e.stderr) + f"\ntimed out after {timeout}s")
        return ExecResult(p.returncode, p.stdout, p.stderr)

    # The lab shares the harness's filesystem; only FUSE data dirs are private to a node, and
    # put/get are for configs and logs outside them.
    def put(self, local: str, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)

    def get(self, remote: str, local: str) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(remote, local)

    def spawn(self, argv: Sequence[str], *, pidfile: str, logfile: str, env: Mapping[str, str] = {}) -> int:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pidfile)
        run_checked(self, spawn_script(argv, pidfile=pidfile, logfile=logfile, env=env), timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, ValueError):
                return int(Path(pidfile).read_text().strip())
            time.sleep(0.005)
        raise HostError(self.name, " ".join(map(str, argv)), -1, f"no pid in {pidfile} after 30 s")

    def signal(self, pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)  # the lab shares the harness's pid namespace


class LocalHost(LabHost):
    """This machine itself as a Host: a lab node without its namespaces (the lab already shares
    the harness's filesystem and pid namespace, so only `exec` differs: no nsenter). For
    processes the harness starts here, as a system's tests and LocalCluster do."""

    def __init__(self, name: str) -> None:
        super().__init__(name, holder_pid=0)

    def _enter(self) -> list[str]:
        return []


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def check_lab_prerequisites() -> None:
    missing = [t for t in TOOLS if not shutil.which(t)]
    if not any(shutil.which(t) for t in IPTABLES):
        missing.append("iptables")
    if missing:
        raise MissingPrerequisite(
            f"the lab needs {', '.join(missing)}",
            hint="install iproute2, util-linux, procps and iptables (scripts/bootstrap.sh does it)",
        )


def _run(argv: Sequence[str], *, input: str | None = None) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, input=input)
    if p.returncode != 0:
        raise HostError("harness", " ".join(argv), p.returncode, p.stderr)
    return p.stdout


def _holder(*, mount: bool) -> subprocess.Popen:
    flags = ["--net", "--mount"] if mount else ["--net"]
    return subprocess.Popen(["unshare", *flags, "--", "sleep", "infinity"], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_unshared(p: subprocess.Popen, before: int) -> None:
    """Wait until the holder has left our network namespace (unshare ran) or report why not."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise MissingPrerequisite(f"unshare failed: {_text(p.stderr.read()).strip() if p.stderr else ''}",
                                      hint="the lab needs root or unprivileged user namespaces")
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{p.pid}/ns/net").st_ino != before and _comm(p.pid) == "sleep":
                return
        time.sleep(0.002)
    raise MissingPrerequisite("unshare did not create a network namespace within 10 s")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _pick_subnet() -> int:
    used = {s.subnet for s in load_states()}
    used |= {int(m) for m in re.findall(r"10\.77\.(\d+)\.", _run(["ip", "-4", "-o", "addr"]))}
    free = [k for k in range(1, 255) if k not in used]
    if not free:
        raise MissingPrerequisite("no free 10.77.k.0/24 subnet for a new lab cluster",
                                  hint="tear old clusters down: logquake cluster down --all")
    return random.SystemRandom().choice(free)


def _nsenter_batch(pid: int, lines: list[str]) -> None:
    _run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", "ip", "-batch", "-"], input="\n".join(lines) + "\n")


def _detect_iptables(host: LabHost) -> str:
    errors = []
    for tool in IPTABLES:
        if not shutil.which(tool):
            continue
        rc, _, err = host.exec([tool, "-w", "-S", "INPUT"], timeout=20)
        if rc == 0:
            return tool
        errors.append(f"{tool}: {err.strip()}")
    raise MissingPrerequisite("no iptables works inside a lab namespace: " + "; ".join(errors),
                              hint="install iptables (nft backend) or load the ip_tables module")


def prepare_lab() -> None:
    """Check tools and, when not root, enter the private user namespace.

    Call it before the process starts any thread (a spinner, a Kafka client): unshare(2) of a
    user namespace refuses multi-threaded callers. `create_lab` calls it too; it is idempotent.
    """
    check_lab_prerequisites()
    state_dir()  # decide the state directory by the real uid, before any userns
    if not is_real_root() and not in_private_userns():
        enter_private_userns()


def create_lab(nodes: Sequence[str], run_dir: Path) -> LabState:
    """Build namespaces, bridge and veths for `nodes`; recorded in a state file as it goes."""
    prepare_lab()
    anchor = None
    if not is_real_root():
        anchor = proc_ref(spawn_anchor())
    cid = os.urandom(3).hex()
    with state_lock():
        k = _pick_subnet()
        state = LabState(cluster_id=cid, subnet=k, mode="root" if anchor is None else "userns",
                         run_dir=str(run_dir), harness_veth=f"lq{cid}", harness_addr=f"10.77.{k}.254",
                         anchor=anchor, owner=proc_ref(os.getpid()))
        state.save()
    try:
        _build(state, nodes)
    except BaseException:
        destroy(state)
        raise
    return state


def _build(state: LabState, nodes: Sequence[str]) -> None:
    k, me = state.subnet, os.stat("/proc/self/ns/net").st_ino
    switch = _holder(mount=False)
    holders = {n: _holder(mount=True) for n in nodes}
    for p in (switch, *holders.values()):
        _wait_unshared(p, me)
    state.switch = proc_ref(switch.pid)
    state.holders = {n: proc_ref(p.pid) for n, p in holders.items()}
    state.addresses = {n: f"10.77.{k}.{11 + i}" for i, n in enumerate(nodes)}
    state.save()
    # The harness side, then the bridge and one veth per node, then each node's address.
    _run(["ip", "link", "add", state.harness_veth, "type", "veth", "peer", "name", "up0", "netns", str(switch.pid)])
    _run(["ip", "addr", "add", f"{state.harness_addr}/24", "dev", state.harness_veth])
    _run(["ip", "link", "set", state.harness_veth, "up"])
    lines = ["link set lo up", "link add br0 type bridge", "link set br0 up", "link set up0 master br0",
             "link set up0 up"]
    for i, p in enumerate(holders.values()):
        lines += [f"link add p{i} type veth peer name eth0 netns {p.pid}", f"link set p{i} master br0",
                  f"link set p{i} up"]
    _nsenter_batch(switch.pid, lines)
    for n, p in holders.items():
        _nsenter_batch(p.pid, ["link set lo up", f"addr add {state.addresses[n]}/24 dev eth0", "link set eth0 up"])
    state.iptables = _detect_iptables(LabHost(nodes[0], holders[nodes[0]].pid))
    state.save()


def lab_hosts(state: LabState) -> dict[str, LabHost]:
    return {n: LabHost(n, r.pid, iptables=state.iptables) for n, r in state.holders.items()}


def stop_lab(state: LabState) -> list[str]:
    """Tear a lab cluster down: every process in its namespaces, so the namespaces go too."""
    return destroy(state)



# -- a cluster on the lab ------------------------------------------------------------------


class LabCluster(NodeCluster):
    """A NodeCluster on lab nodes; `state` is what `logquake cluster status|down` read back."""

    def __init__(self, *, state: LabState, **kw) -> None:
        super().__init__(harness_address=state.harness_addr, iptables=state.iptables, run_dir=state.run_dir,
                         on_close=lambda: _stop_logged(state), **kw)
        self.state = state


def _stop_logged(state: LabState) -> None:
    problems = stop_lab(state)
    if problems:
        log.warning("lab teardown left: %s", "; ".join(problems))


def _lab_cluster(state: LabState, cfg: TestConfig, system: System, needs: NodeNeeds) -> LabCluster:
    hosts = lab_hosts(state)
    run_dir = Path(state.run_dir)
    specs = tuple(NodeSpec(name=n, node_id=i, address=state.addresses[n], node_dir=str(run_dir / "nodes" / n),
                           client_port=system.client_port, peer_port=system.peer_port)
                  for i, n in enumerate(state.holders, start=1))
    needs = NodeNeeds(faketime=needs.faketime, lazyfs=needs.lazyfs and fuse_usable())
    lifecycle = system.make_lifecycle(NodeSetup(hosts=hosts, specs=specs, needs=needs, python=sys.executable, cfg=cfg))
    return LabCluster(state=state, system=system, hosts=hosts, lifecycle=lifecycle, specs=specs, needs=needs,
                      bootstrap=system.bootstrap(specs, cfg), python=sys.executable)


def open_lab(cfg: TestConfig, run_dir: Path, system: System, needs: NodeNeeds, *, start: bool = True) -> LabCluster:
    """Bring up cfg.nodes lab nodes under run_dir/nodes/ and start the system on each."""
    if cfg.nodes < 1:
        raise ConfigError("nodes", f"must be at least 1, got {cfg.nodes}")
    state = create_lab(node_names(cfg.nodes), run_dir)
    try:
        cluster = _lab_cluster(state, cfg, system, needs)
        cluster.install_all()
        if start:
            cluster.start_all()
    except BaseException:
        stop_lab(state)
        raise
    return cluster


def attach_lab(state: LabState, system: System, cfg: TestConfig | None = None) -> LabCluster:
    """The cluster of a lab that is already up (for `logquake cluster status`); closing it stops it."""
    return _lab_cluster(state, cfg or TestConfig(nodes=len(state.holders)), system, NodeNeeds())

"""The lab's state file: what a cluster created, so `logquake cluster down` can remove it all.

Everything a lab cluster creates lives inside namespaces held by processes (a holder per node,
one for the bridge, an anchor for an unprivileged run): the bridge, veths and iptables chains
vanish with their namespace, and the harness-side veth vanishes with its peer. So cleaning up
after a harness that was SIGKILLed is: kill every process whose network or user namespace is
one the state file names (daemons included), then the holders. Pids are checked against their
recorded start time, so a recycled pid is never killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from logquake.cluster.userns import in_private_userns

__all__ = ["LabState", "ProcRef", "state_dir", "load_states", "destroy", "proc_ref", "state_lock"]


@dataclass(frozen=True, kw_only=True)
class ProcRef:
    """A process we started, identified by pid and start time (so pid reuse is harmless)."""

    pid: int
    start: float
    netns: int = 0  # inode of its network namespace
    userns: int = 0


@dataclass(kw_only=True)
class LabState:
    cluster_id: str
    subnet: int  # k of 10.77.k.0/24
    mode: str  # "root" | "userns"
    run_dir: str
    harness_veth: str
    harness_addr: str
    anchor: ProcRef | None = None
    switch: ProcRef | None = None
    holders: dict[str, ProcRef] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    iptables: str = "iptables-nft"
    owner: ProcRef | None = None  # the harness that made it; `down` spares clusters whose owner lives
    created: float = field(default_factory=time.time)

    def owner_alive(self) -> bool:
        return self.owner is not None and is_running(self.owner)

    @property
    def path(self) -> Path:
        return state_dir() / f"{self.cluster_id}.json"

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> LabState:
        d = json.loads(path.read_text())
        for k in ("anchor", "switch", "owner"):
            d[k] = ProcRef(**d[k]) if d.get(k) else None
        d["holders"] = {n: ProcRef(**r) for n, r in d.get("holders", {}).items()}
        return cls(**d)


def state_dir() -> Path:
    """/run/logquake for root; per user otherwise (decided by the real uid, also inside our userns)."""
    if os.environ.get("LOGQUAKE_STATE_DIR"):
        d = Path(os.environ["LOGQUAKE_STATE_DIR"])
    elif os.geteuid() == 0 and not in_private_userns():
        d = Path("/run/logquake")
    else:
        base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/logquake-{os.environ.get('LOGQUAKE_REAL_UID', os.getuid())}"
        d = Path(base) / "logquake" if os.environ.get("XDG_RUNTIME_DIR") else Path(base)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ.setdefault("LOGQUAKE_STATE_DIR", str(d))  # children inside the userns agree with us
    return d


@contextlib.contextmanager
def state_lock() -> Iterator[None]:
    """Serialises subnet allocation between harnesses starting at the same moment."""
    with open(state_dir() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def load_states() -> list[LabState]:
    out = []
    for p in sorted(state_dir().glob("*.json")):
        try:
            out.append(LabState.load(p))
        except (OSError, ValueError, TypeError):
            continue
    return out


def _stat(pid: int) -> tuple[float, str] | None:
    """(start time in clock ticks, state letter) of pid, or None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2 :].split()
    return float(rest[19]), rest[0]


def _ns_inode(pid: int, kind: str) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return 0


def proc_ref(pid: int) -> ProcRef:
    st = _stat(pid)
    return ProcRef(pid=pid, start=st[0] if st else 0.0, netns=_ns_inode(pid, "net"), userns=_ns_inode(pid, "user"))


def is_running(ref: ProcRef) -> bool:
    st = _stat(ref.pid)
    return st is not None and st[0] == ref.start and st[1] != "Z"


def _members(netns: set[int], userns: set[int]) -> list[int]:
    """Every live process in one of these namespaces (daemons started inside the lab)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if _ns_inode(pid, "net") in netns or (userns and _ns_inode(pid, "user") in userns):
            pids.append(pid)
    return pids


def _orphans(state: LabState) -> set[int]:
    """Daemons named by pid files whose holder died: still in the namespace recorded for their node."""
    out = set()
    for node, ref in state.holders.items():
        for pidfile in Path(state.run_dir, "nodes", node).glob("*.pid"):
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            if ref.netns and _ns_inode(pid, "net") == ref.netns:
                out.add(pid)
    return out


def destroy(state: LabState, *, timeout: float = 10.0) -> list[str]:
    """Kill everything the cluster started and forget it; returns what could not be removed."""
    refs = [r for r in (state.switch, state.anchor, *state.holders.values()) if r is not None]
    live = [r for r in refs if is_running(r)]
    netns = {r.netns for r in live if r.netns}
    userns = {state.anchor.userns} if state.anchor and state.anchor in live and state.anchor.userns else set()
    if userns and _ns_inode(os.getpid(), "user") in userns:
        userns = set()  # we joined it ourselves: killing by userns would include our own helpers
    # The harness-side veth is the one thing outside the lab's namespaces: delete it now rather
    # than leave it to the kernel's asynchronous namespace cleanup.
    subprocess.run(["ip", "link", "del", state.harness_veth], capture_output=True, check=False)
    victims = set(_members(netns, userns)) | {r.pid for r in live} | _orphans(state)
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = [p for p in victims if _stat(p) and _stat(p)[1] != "Z"]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _stat(p) and _stat(p)[1] != "Z"]
    with contextlib.suppress(OSError):
        state.path.unlink()
    return [f"pid {p} still running" for p in left]

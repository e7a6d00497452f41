"""The fault families: partition, kill, pause, clock, disk, packet-loss, and the combinations
that bite replicated logs hardest: stale-leader, pause-kill, partition-kill.

Each decides with pure helpers (grudges, targets) and a seeded RNG, acts through the cluster's
hosts and its system's node lifecycle, declares what it needs from the nodes (`needs`), and
knows how to undo itself (`stop` for what it started, `heal` for anything at all). Descriptions are plain words: they become the history's nemesis op values.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import TypeVar

from logquake.cluster.cluster import Cluster
from logquake.cluster.host import run_checked
from logquake.cluster.shims import drop_unsynced, set_clock
from logquake.errors import ConfigError
from logquake.nemesis.grudges import (
    CLIENTS,
    EXPLICIT,
    GRUDGES,
    busiest_leader,
    complete_grudge,
    describe_grudge,
    make_grudge,
)
from logquake.nemesis.net import Net
from logquake.nemesis.targets import TARGETS, pick_targets
from logquake.systems.base import Kill, NodeNeeds, Pause

C = TypeVar("C", Kill, Pause)

__all__ = ["PartitionFault", "KillFault", "PauseFault", "ClockFault", "DiskFault", "PacketLossFault",
           "StaleLeaderFault", "PauseKillFault", "PartitionKillFault"]


def _leaders(target: Cluster) -> list[str]:
    """The leader of each partition (a node once per partition it leads); [] when unknown."""
    try:
        return sorted(target.leaders(timeout=3.0).values())
    except Exception:  # no broker answering is a normal state under faults
        return []


def _capable(target: Cluster, family: str, capability: type[C]) -> C:
    """The lifecycle as `capability` (Kill, Pause); ConfigError naming the fault when it lacks it."""
    lc = target.lifecycle
    if not isinstance(lc, capability):
        raise ConfigError("nemesis", f"{family} needs nodes that can {capability.__name__.lower()}; "
                          f"{type(lc).__name__} cannot")
    return lc


def _require_lazyfs(target: Cluster, family: str) -> None:
    """ConfigError naming the fault when the nodes' data dirs cannot lose unsynced writes."""
    if not target.needs.lazyfs:
        raise ConfigError("nemesis", f"{family} needs LazyFS data directories (FUSE), which this cluster has not",
                          hint="run it on the lab backend as root or with /dev/fuse usable")


def _crash_losing_unsynced(target: Cluster, killer: Kill, nodes: Sequence[str]) -> None:
    """SIGKILL `nodes`, then drop every write to their data dirs that was not fsynced.

    Every node is down before any loses data: a power cut, not a rolling crash.
    """
    for n in nodes:
        killer.kill(n)
    for n in nodes:
        drop_unsynced(target.hosts[n], target.lifecycle.spec(n))


def _targets(target: Cluster, rng: random.Random, kind: str | None) -> list[str]:
    kind = kind or rng.choice(TARGETS)
    leaders = _leaders(target) if kind == "leaders" else []
    return pick_targets(kind, target.nodes, rng, current_leaders=leaders)


class PartitionFault:
    """Grudges between brokers; `partition:clients` cuts some brokers off from the clients only.

    Random choice is among the broker-broker shapes of GRUDGES; `clients`, `leader` (the
    busiest leader alone against a majority), `replies` and `replies-reset` are opt-in by name.
    `replies` is one-way: every broker drops what it sends to the clients, while their requests
    still arrive and are acted on, so every write in flight commits unacknowledged. Whether the
    client retries it depends on the window: shorter than its request timeout, TCP simply
    delivers the held-back replies after the heal and nothing is retried. `replies-reset` ends
    the same window by aborting every client connection on the brokers (still muted, resets
    let through) before the heal: the clients see their connections fail with requests
    unanswered, reconnect and retry them at once, each one already appended (what
    idempotent-producer deduplication exists for).
    """

    name = "partition"
    needs = NodeNeeds()
    variants = tuple(GRUDGES)
    accepts = (*GRUDGES, *EXPLICIT)

    def __init__(self, target: Cluster, net: Net, rng: random.Random) -> None:
        self.target, self.net, self.rng = target, net, rng
        self.reset_on_stop = False

    def start(self, variant: str) -> str:
        kind = variant or self.rng.choice(self.variants)
        if kind in ("replies", "replies-reset"):
            if CLIENTS not in self.net.addresses:
                raise ValueError(f"partition:{kind} needs the clients' address (this cluster has none)")
            self.reset_on_stop = kind == "replies-reset"
            self.net.mute(self.target.nodes, CLIENTS, pass_resets=self.reset_on_stop)
            return f"{kind}: {','.join(self.target.nodes)} drop everything to the clients"
        leaders = _leaders(self.target) if kind in ("leaders", "leader") else []
        grudge = make_grudge(kind, self.target.nodes, self.rng, current_leaders=leaders)
        self.net.drop(grudge)
        return f"{kind}: {describe_grudge(grudge)}"

    def stop(self) -> str:
        aborted = ""
        try:
            if self.reset_on_stop:
                self.reset_on_stop = False
                counts = self.net.reset(self.target.nodes, CLIENTS)
                aborted = f"aborted {sum(counts.values())} client connections, "
        finally:  # a failed reset must not leave the clients cut off
            self.net.heal()
        return f"{aborted}network healed"

    def heal(self) -> None:
        self.reset_on_stop = False
        self.net.heal(thorough=True)


class KillFault:
    """SIGKILL brokers; stop restarts them."""

    name = "kill"
    needs = NodeNeeds()
    variants = accepts = TARGETS

    def __init__(self, target: Cluster, rng: random.Random) -> None:
        self.target, self.rng = target, rng
        self.killer = _capable(target, self.name, Kill)
        self.killed: list[str] = []

    def start(self, variant: str) -> str:
        nodes = _targets(self.target, self.rng, variant)
        for n in nodes:
            self.killer.kill(n)
        self.killed = sorted(set(self.killed) | set(nodes))
        return f"killed {','.join(nodes)}"

    def stop(self) -> str:
        nodes, self.killed = self.killed, []
        for n in nodes:
            self.target.lifecycle.start(n)
        return f"started {','.join(nodes) or 'nothing'}"

    def heal(self) -> None:
        self.killed = []
        for n in self.target.nodes:
            self.target.lifecycle.start(n)  # idempotent: a running broker is left alone


class PauseFault:
    """SIGSTOP brokers; stop sends SIGCONT."""

    name = "pause"
    needs = NodeNeeds()
    variants = accepts = TARGETS

    def __init__(self, target: Cluster, rng: random.Random) -> None:
        self.target, self.rng = target, rng
        self.pauser = _capable(target, self.name, Pause)
        self.paused: list[str] = []

    def start(self, variant: str) -> str:
        nodes = _targets(self.target, self.rng, variant)
        for n in nodes:
            self.pauser.pause(n)
        self.paused = sorted(set(self.paused) | set(nodes))
        return f"paused {','.join(nodes)}"

    def stop(self) -> str:
        nodes, self.paused = self.paused, []
        for n in nodes:
            self.pauser.resume(n)
        return f"resumed {','.join(nodes) or 'nothing'}"

    def heal(self) -> None:
        self.paused = []
        for n in self.target.nodes:
            self.pauser.resume(n)


class ClockFault:
    """Wall-clock skew per node through libfaketime: bump, strobe, reset.

    bump: one step of +-2^2..2^18 ms (as Jepsen's). strobe: the clock jumps between +delta and
    the true time every `period` until stopped (a thread rewrites the offset file). reset: true time.
    """

    name = "clock"
    needs = NodeNeeds(faketime=True)
    variants = accepts = ("bump", "strobe", "reset")

    def __init__(self, target: Cluster, rng: random.Random) -> None:
        self.target, self.rng = target, rng
        self._strobe_stop = threading.Event()
        self._strobe: threading.Thread | None = None

    def start(self, variant: str) -> str:
        kind = variant or self.rng.choice(self.variants)
        nodes = _targets(self.target, self.rng, None)
        if kind == "reset":
            return self._reset(nodes)
        if kind == "bump":
            parts = []
            for n in nodes:
                ms = self.rng.choice((-1, 1)) * 2 ** self.rng.randint(2, 18)
                self._set(n, ms / 1000)
                parts.append(f"{n} {ms:+d} ms")
            return "bumped " + ", ".join(parts)
        return self.strobe(nodes, delta=2 ** self.rng.randint(2, 16) / 1000, period=2 ** self.rng.randint(4, 10) / 1000)

    def _set(self, node: str, offset_s: float) -> None:
        set_clock(self.target.hosts[node], self.target.lifecycle.spec(node), offset_s)

    def strobe(self, nodes: Sequence[str], *, delta: float, period: float) -> str:
        """Flip the clocks of `nodes` between +delta s and true time every `period` s, until stop()."""
        self._stop_strobe()
        self._strobe_stop.clear()
        self._strobe = threading.Thread(target=self._run_strobe, args=(nodes, delta, period),
                                        name="clock-strobe", daemon=True)
        self._strobe.start()
        return f"strobing {','.join(nodes)} by {delta * 1000:.0f} ms every {period * 1000:.0f} ms"

    def _run_strobe(self, nodes: Sequence[str], delta: float, period: float) -> None:
        on = False
        while not self._strobe_stop.wait(period):
            on = not on
            for n in nodes:
                try:
                    self._set(n, delta if on else 0.0)
                except Exception:  # a node being restarted must not end the strobe
                    pass

    def _stop_strobe(self) -> None:
        self._strobe_stop.set()
        if self._strobe is not None:
            self._strobe.join(timeout=10)
            self._strobe = None

    def _reset(self, nodes: Sequence[str]) -> str:
        for n in nodes:
            self._set(n, 0.0)
        return f"reset clocks of {','.join(nodes)}"

    def stop(self) -> str:
        self._stop_strobe()
        return self._reset(self.target.nodes)

    def heal(self) -> None:
        self.stop()


class DiskFault:
    """Crash nodes and damage what a crash can: unsynced writes lost, or a torn data-file tail.

    lose-unfsynced crashes a minority and drops their unsynced writes; power-loss does that to
    every node at once (Jepsen's "kill all, lose unfsynced": only what a majority fsynced before
    the ack survives). Both need the LazyFS data directories, which the backend grants where
    it has FUSE. corrupt-tail works on any host: it tears the newest of the system's data
    files (`data_files`, globs relative to the data dir; `System.data_files`) on a crashed
    minority, and is not offered for a system that declares none. stop restarts the crashed nodes.
    """

    KINDS = ("lose-unfsynced", "corrupt-tail", "power-loss", "power-loss-majority")

    name = "disk"
    needs = NodeNeeds(lazyfs=True)

    def __init__(self, target: Cluster, rng: random.Random, *, data_files: Sequence[str] = ()) -> None:
        self.target, self.rng = target, rng
        self.killer = _capable(target, self.name, Kill)
        self.crashed: list[str] = []
        self.data_files = tuple(data_files)
        lazy = target.needs.lazyfs
        tear = ("corrupt-tail",) if self.data_files else ()
        # power-loss is named explicitly (`disk:power-loss`): the seeded random draw stays as it was.
        self.variants = ("lose-unfsynced", *tear) if lazy else tear
        self.accepts = tuple(k for k in self.KINDS if (k in tear if k == "corrupt-tail" else lazy))
        if not self.accepts:
            raise ConfigError("nemesis", "disk faults need LazyFS data directories (FUSE) or the system's data "
                              "files for corrupt-tail; this cluster has neither")
        self.lazy = lazy

    def start(self, variant: str) -> str:
        kind = variant or self.rng.choice(self.variants)
        if kind not in self.KINDS:
            raise ValueError(f"unknown disk fault {kind!r}; allowed: {', '.join(self.KINDS)}")
        if kind != "corrupt-tail" and not self.lazy:
            raise ValueError(f"disk:{kind} needs LazyFS data directories (FUSE), which this cluster has not")
        if kind not in self.accepts:
            raise ValueError(f"disk:{kind} needs the system's data files, and it declares none")
        who = {"power-loss": "all", "power-loss-majority": "majority"}.get(kind, "minority")
        nodes = _targets(self.target, self.rng, who)
        if kind == "corrupt-tail":
            for n in nodes:
                self.killer.kill(n)
            done = [f"{n}: {self._corrupt(n)}" for n in nodes]
        else:
            _crash_losing_unsynced(self.target, self.killer, nodes)
            done = [f"{n}: unsynced writes dropped" for n in nodes]
        self.crashed = sorted(set(self.crashed) | set(nodes))
        return f"{kind}: " + "; ".join(done)

    def _corrupt(self, node: str) -> str:
        mode = self.rng.choice(("truncate", "flip"))
        argv = [self.target.python, "-m", "logquake.nemesis.disktool", "corrupt-tail",
                self.target.lifecycle.spec(node).data_dir, *(a for g in self.data_files for a in ("--files", g)),
                "--mode", mode, "--bytes", str(self.rng.randint(1, 256)), "--seed", str(self.rng.randrange(2**31))]
        return run_checked(self.target.hosts[node], argv, timeout=60).strip()

    def stop(self) -> str:
        nodes, self.crashed = self.crashed, []
        for n in nodes:
            self.target.lifecycle.start(n)
        return f"started {','.join(nodes) or 'nothing'}"

    def heal(self) -> None:
        self.crashed = []
        for n in self.target.nodes:
            self.target.lifecycle.start(n)


class PacketLossFault:
    """Random loss of incoming packets on some nodes (iptables `statistic` match)."""

    name = "packet-loss"
    needs = NodeNeeds()
    variants = accepts = TARGETS

    def __init__(self, target: Cluster, net: Net, rng: random.Random) -> None:
        self.target, self.net, self.rng = target, net, rng

    def start(self, variant: str) -> str:
        nodes = _targets(self.target, self.rng, variant)
        p = self.rng.choice((0.05, 0.1, 0.2, 0.3, 0.5))
        self.net.lose(nodes, p)
        return f"{int(p * 100)}% packet loss on {','.join(nodes)}"

    def stop(self) -> str:
        self.net.heal_loss()
        return "packet loss healed"

    def heal(self) -> None:
        self.net.heal_loss(thorough=True)




class StaleLeaderFault:
    """Make a stale node stand for election against voters that are up to date but know nothing.

    The classic recipe for an unclean election: isolate the busiest leader until the majority
    has elected new leaders and committed writes it lacks (`hold` s), kill that majority, heal
    the network and restart just enough of it for a quorum with the stale node; stop restarts
    the rest. The restarted voters heard from no leader (no lease) while the stale node has been
    campaigning all along, so it asks first: a broker that votes without the log-freshness check
    elects it and truncates committed entries; a correct one refuses and waits for a fresh node.
    """

    name = "stale-leader"
    needs = NodeNeeds()
    variants = accepts = ()

    def __init__(self, target: Cluster, net: Net, rng: random.Random, *, hold: float = 5.0) -> None:
        self.target, self.net, self.rng, self.hold = target, net, rng, hold
        self.killer = _capable(target, self.name, Kill)
        self.down: list[str] = []

    def start(self, variant: str) -> str:
        nodes = list(self.target.nodes)
        stale = busiest_leader(nodes, self.rng, _leaders(self.target))
        rest = [n for n in nodes if n != stale]
        self.net.drop(complete_grudge([[stale], rest]))
        time.sleep(self.hold)
        for n in rest:
            self.killer.kill(n)
        self.net.heal()
        up = sorted(self.rng.sample(rest, len(nodes) // 2)) if rest else []
        for n in up:
            self.target.lifecycle.start(n)
        self.down = sorted(set(self.down) | (set(rest) - set(up)))
        return (f"{stale} isolated {self.hold:g} s; killed {','.join(rest) or 'nothing'}; network healed; "
                f"restarted {','.join(up) or 'nothing'} ({','.join(self.down) or 'none'} still down)")

    def stop(self) -> str:
        nodes, self.down = self.down, []
        for n in nodes:
            self.target.lifecycle.start(n)
        return f"started {','.join(nodes) or 'nothing'}"

    def heal(self) -> None:
        self.down = []
        self.net.heal(thorough=True)
        for n in self.target.nodes:
            self.target.lifecycle.start(n)


class _CrashWhileAway:
    """One node crashes and loses its unsynced writes while another is cut off (pause or partition).

    The sequence that turns a lost unsynced tail into lost acknowledged writes: `away` is cut
    off first, the rest go on committing writes `away` lacks for `hold` s, then `crashed` (a
    node that holds them) is SIGKILLed and loses what it had not fsynced. Only the nodes left
    hold those writes now. stop restarts `crashed` and lets `away` back at once, so the two
    (one with a truncated log, one with a stale one) meet again with the rest: a system whose
    votes or acknowledgements trusted unfsynced state can elect between them and drop writes
    it acknowledged. Needs a cluster of at least 2 nodes with LazyFS data dirs.
    """

    name: str
    needs = NodeNeeds(lazyfs=True)
    variants: Sequence[str] = ()
    accepts: Sequence[str] = ()

    def __init__(self, target: Cluster, rng: random.Random, *, hold: float = 5.0) -> None:
        self.target, self.rng, self.hold = target, rng, hold
        self.killer = _capable(target, self.name, Kill)
        _require_lazyfs(target, self.name)
        if len(target.nodes) < 2:
            raise ConfigError("nemesis", f"{self.name} needs at least 2 nodes, got {len(target.nodes)}")
        self.crashed: list[str] = []
        self.away: list[str] = []

    def _cut_off(self, node: str) -> str:
        """Cut `node` off from the others; say how."""
        raise NotImplementedError

    def _let_back(self, nodes: Sequence[str]) -> str:
        """Undo `_cut_off` for `nodes`; say how."""
        raise NotImplementedError

    def _let_all_back(self) -> None:
        """Undo any `_cut_off` of any node, whatever this object believes (the final heal)."""
        raise NotImplementedError

    def start(self, variant: str) -> str:
        crashed, away = self.rng.sample(list(self.target.nodes), 2)
        self.away = sorted({*self.away, away})
        cut = self._cut_off(away)
        time.sleep(self.hold)
        self.crashed = sorted({*self.crashed, crashed})
        _crash_losing_unsynced(self.target, self.killer, [crashed])
        return f"{cut}; {self.hold:g} s later crashed {crashed}, its unsynced writes dropped"

    def stop(self) -> str:
        crashed, self.crashed = self.crashed, []
        away, self.away = self.away, []
        try:
            for n in crashed:
                self.target.lifecycle.start(n)
        finally:  # a node that failed to start must not leave the other one cut off
            back = self._let_back(away)
        return f"started {','.join(crashed) or 'nothing'}; {back}"

    def heal(self) -> None:
        self.crashed, self.away = [], []
        self._let_all_back()
        for n in self.target.nodes:
            self.target.lifecycle.start(n)


class PauseKillFault(_CrashWhileAway):
    """pause-kill: a node crashes, losing its unsynced writes, while another is paused (SIGSTOP)."""

    name = "pause-kill"

    def __init__(self, target: Cluster, rng: random.Random, *, hold: float = 5.0) -> None:
        super().__init__(target, rng, hold=hold)
        self.pauser = _capable(target, self.name, Pause)

    def _cut_off(self, node: str) -> str:
        self.pauser.pause(node)
        return f"paused {node}"

    def _let_back(self, nodes: Sequence[str]) -> str:
        for n in nodes:
            self.pauser.resume(n)
        return f"resumed {','.join(nodes) or 'nothing'}"

    def _let_all_back(self) -> None:
        for n in self.target.nodes:
            self.pauser.resume(n)


class PartitionKillFault(_CrashWhileAway):
    """partition-kill: a node crashes, losing its unsynced writes, while another is partitioned
    away from every other node (the clients still reach it)."""

    name = "partition-kill"

    def __init__(self, target: Cluster, net: Net, rng: random.Random, *, hold: float = 5.0) -> None:
        super().__init__(target, rng, hold=hold)
        self.net = net

    def _cut_off(self, node: str) -> str:
        grudge = complete_grudge([[node], [n for n in self.target.nodes if n != node]])
        self.net.drop(grudge)
        return f"isolated {node}: {describe_grudge(grudge)}"

    def _let_back(self, nodes: Sequence[str]) -> str:
        self.net.heal()
        return "network healed"

    def _let_all_back(self) -> None:
        self.net.heal(thorough=True)

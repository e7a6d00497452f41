"""The fault families: partition, kill, pause, clock, disk, packet-loss.

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
           "StaleLeaderFault"]


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
    """Crash brokers and damage what a crash can: unsynced writes lost, or a torn segment tail.

    lose-unfsynced crashes a minority and drops their unsynced writes; power-loss does that to
    every node at once (Jepsen's "kill all, lose unfsynced": only what a majority fsynced before
    the ack survives). Both need the LazyFS data directories, which the backend grants where
    it has FUSE; corrupt-tail works on any host. stop restarts the crashed brokers.
    """

    KINDS = ("lose-unfsynced", "corrupt-tail", "power-loss", "power-loss-majority")

    name = "disk"
    needs = NodeNeeds(lazyfs=True)

    def __init__(self, target: Cluster, rng: random.Random) -> None:
        self.target, self.rng = target, rng
        self.killer = _capable(target, self.name, Kill)
        self.crashed: list[str] = []
        lazy = target.needs.lazyfs
        # power-loss is named explicitly (`disk:power-loss`): the seeded random draw stays as it was.
        self.variants = ("lose-unfsynced", "corrupt-tail") if lazy else ("corrupt-tail",)
        self.accepts = self.KINDS if lazy else ("corrupt-tail",)
        self.lazy = lazy

    def start(self, variant: str) -> str:
        kind = variant or self.rng.choice(self.variants)
        if kind not in self.KINDS:
            raise ValueError(f"unknown disk fault {kind!r}; allowed: {', '.join(self.KINDS)}")
        if kind != "corrupt-tail" and not self.lazy:
            raise ValueError(f"disk:{kind} needs LazyFS data directories (FUSE), which this cluster has not")
        who = {"power-loss": "all", "power-loss-majority": "majority"}.get(kind, "minority")
        nodes = _targets(self.target, self.rng, who)
        for n in nodes:  # every node down before any loses data: a power cut, not a rolling crash
            self.killer.kill(n)
        done = []
        for n in nodes:
            if kind != "corrupt-tail":
                drop_unsynced(self.target.hosts[n], self.target.lifecycle.spec(n))
                done.append(f"{n}: unsynced writes dropped")
            else:
                done.append(f"{n}: {self._corrupt(n)}")
        self.crashed = sorted(set(self.crashed) | set(nodes))
        return f"{kind}: " + "; ".join(done)

    def _corrupt(self, node: str) -> str:
        mode = self.rng.choice(("truncate", "flip"))
        argv = [self.target.python, "-m", "logquake.nemesis.disktool", "corrupt-tail",
                self.target.lifecycle.spec(node).data_dir,
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

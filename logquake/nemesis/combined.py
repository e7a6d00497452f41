"""`build_nemesis`: one nemesis over every fault family the test config asks for.

A config's `nemesis` entries are fault specs: a family (`partition`: its variant drawn at
random each time) or `family:variant` (`partition:leader`, `disk:power-loss`: always that
one). The schedule draws among the specs; one Fault object per family serves them all.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

from logquake.cluster.backends import system_for
from logquake.cluster.cluster import Cluster
from logquake.config import TestConfig
from logquake.errors import ConfigError
from logquake.nemesis.faults import (
    ClockFault,
    DiskFault,
    KillFault,
    PacketLossFault,
    PartitionFault,
    PartitionKillFault,
    PauseFault,
    PauseKillFault,
    StaleLeaderFault,
)
from logquake.nemesis.grudges import CLIENTS
from logquake.nemesis.net import Net
from logquake.nemesis.protocol import Fault, Nemesis, NoopNemesis
from logquake.systems.base import NodeNeeds

__all__ = ["FAMILIES", "FAULTS", "CombinedNemesis", "build_nemesis", "fault_families", "make_faults", "node_needs"]

# Every fault family, by the name a spec uses.
FAULTS: dict[str, type[Fault]] = {f.name: f for f in (
    PartitionFault, KillFault, PauseFault, ClockFault, DiskFault, PacketLossFault, StaleLeaderFault,
    PauseKillFault, PartitionKillFault)}
FAMILIES = tuple(FAULTS)


def fault_families(specs: Sequence[str]) -> list[str]:
    """The families of fault specs, in first-seen order: ["partition:leader", "kill"] -> partition, kill."""
    return list(dict.fromkeys(s.partition(":")[0] for s in specs))


def node_needs(specs: Sequence[str]) -> NodeNeeds:
    """What the nodes must provide for these fault specs: the union of their families' needs."""
    return NodeNeeds.union(FAULTS[f].needs for f in fault_families(specs) if f in FAULTS)

log = logging.getLogger(__name__)


class CombinedNemesis:
    """Runs one fault at a time out of several families; heal undoes all of them."""

    def __init__(self, faults: Sequence[Fault], *, net: Net | None = None, specs: Sequence[str] = ()) -> None:
        self._faults = {f.name: f for f in faults}
        self.faults = tuple(specs) or tuple(self._faults)  # what the schedule draws from
        self.net = net
        self.active: Fault | None = None

    def setup(self) -> None:
        if self.net is not None:
            self.net.heal(thorough=True)
            self.net.heal_loss(thorough=True)

    def start(self, spec: str) -> str:
        family, _, variant = spec.partition(":")
        if family not in self._faults:
            raise ValueError(f"unknown fault {family!r}; this nemesis has {', '.join(self._faults) or 'none'}")
        if self.active is not None:
            self.stop()
        fault = self._faults[family]
        self.active = fault
        return fault.start(variant)

    def stop(self) -> str:
        fault, self.active = self.active, None
        return fault.stop() if fault is not None else "no fault running"

    def heal(self) -> str:
        """Heal every family; collect failures so one broken heal does not skip the others."""
        self.active = None
        errors = []
        for name, fault in self._faults.items():
            try:
                fault.heal()
            except Exception as e:
                errors.append(f"{name}: {e}")
        if errors:
            raise RuntimeError("heal failed: " + "; ".join(errors))
        return f"healed {', '.join(self._faults)}"

    def teardown(self) -> None:
        try:
            self.heal()
        except Exception as e:
            log.warning("nemesis teardown: %s", e)


def make_faults(names: Sequence[str], target: Cluster, rng: random.Random, net: Net, *,
                data_files: Sequence[str] = ()) -> list[Fault]:
    """One Fault per family named in `names`; ConfigError for an unknown family or variant.

    `data_files` are the system's data-file globs (`System.data_files`), which corrupt-tail tears.
    """
    makers = {
        "partition": lambda: PartitionFault(target, net, rng),
        "kill": lambda: KillFault(target, rng),
        "pause": lambda: PauseFault(target, rng),
        "clock": lambda: ClockFault(target, rng),
        "disk": lambda: DiskFault(target, rng, data_files=data_files),
        "packet-loss": lambda: PacketLossFault(target, net, rng),
        "stale-leader": lambda: StaleLeaderFault(target, net, rng),
        "pause-kill": lambda: PauseKillFault(target, rng),
        "partition-kill": lambda: PartitionKillFault(target, net, rng),
    }
    unknown = [f for f in fault_families(names) if f not in FAULTS]
    if unknown:
        raise ConfigError("nemesis", f"unknown fault {unknown[0]!r}; allowed: {', '.join(FAMILIES)} (optionally :variant)")
    faults = {f: makers[f]() for f in fault_families(names)}
    for spec in names:  # a misspelt variant fails here, before the run starts
        family, _, variant = spec.partition(":")
        if variant and variant not in faults[family].accepts:
            accepts = faults[family].accepts
            raise ConfigError("nemesis", f"{spec!r}: {family} has no variant {variant!r} here; "
                              f"allowed: {', '.join(accepts) or 'none (use the bare family)'}",
                              hint="disk's lose-unfsynced and power-loss variants need LazyFS (FUSE)"
                              if family == "disk" else None)
    return list(faults.values())


def build_nemesis(cfg: TestConfig, cluster: Cluster) -> Nemesis:
    """The nemesis for cfg.nemesis over cluster, its choices drawn from a RNG seeded by cfg.seed."""
    if not cfg.nemesis:
        return NoopNemesis()
    rng = random.Random(f"nemesis-{cfg.seed}")
    addresses = dict(cluster.addresses)
    if cluster.harness_address:
        addresses[CLIENTS] = cluster.harness_address
    net = Net(cluster.hosts, addresses, iptables=cluster.iptables)
    faults = make_faults(cfg.nemesis, cluster, rng, net, data_files=system_for(cfg).data_files)
    return CombinedNemesis(faults, net=net, specs=cfg.nemesis)

"""Faults and their schedule (DESIGN.md §5).

Pure decisions (grudges, targets, the flip-flop schedule) are separate from acting on nodes
(net.py's iptables chains, faults.py through the Host protocol and broker lifecycle).
"""

from logquake.nemesis.combined import FAMILIES, CombinedNemesis, build_nemesis, fault_families, make_faults
from logquake.nemesis.faults import (
    ClockFault,
    DiskFault,
    KillFault,
    PacketLossFault,
    PartitionFault,
    PauseFault,
    StaleLeaderFault,
)
from logquake.nemesis.grudges import (
    CLIENTS,
    GRUDGES,
    Grudge,
    complete_grudge,
    cut_links,
    describe_grudge,
    make_grudge,
)
from logquake.nemesis.net import CHAIN, LOSS_CHAIN, OUT_CHAIN, Net
from logquake.nemesis.protocol import Fault, Nemesis, NemesisTarget, NoopNemesis
from logquake.nemesis.schedule import Action, FlipFlop, NemesisScheduler, simulate
from logquake.nemesis.targets import TARGETS, pick_targets

__all__ = [
    "CHAIN",
    "CLIENTS",
    "GRUDGES",
    "LOSS_CHAIN",
    "OUT_CHAIN",
    "TARGETS",
    "Action",
    "ClockFault",
    "CombinedNemesis",
    "FAMILIES",
    "DiskFault",
    "Fault",
    "FlipFlop",
    "Grudge",
    "KillFault",
    "Nemesis",
    "NemesisScheduler",
    "NemesisTarget",
    "Net",
    "NoopNemesis",
    "PacketLossFault",
    "PartitionFault",
    "PauseFault",
    "StaleLeaderFault",
    "build_nemesis",
    "complete_grudge",
    "cut_links",
    "describe_grudge",
    "fault_families",
    "make_faults",
    "make_grudge",
    "pick_targets",
    "simulate",
]

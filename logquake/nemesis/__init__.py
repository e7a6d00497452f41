"""Faults and their schedule (docs/architecture.md).

Pure decisions (grudges, targets, the flip-flop schedule) are separate from acting on nodes
(net.py's iptables chains, faults.py through the Host protocol and the system's node lifecycle).
Each fault family declares what it needs from the nodes; `node_needs` unions them for a test.
"""

from logquake.nemesis.combined import (
    FAMILIES,
    FAULTS,
    CombinedNemesis,
    build_nemesis,
    fault_families,
    make_faults,
    node_needs,
)
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
from logquake.nemesis.protocol import Fault, Nemesis, NoopNemesis
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
    "FAULTS",
    "DiskFault",
    "Fault",
    "FlipFlop",
    "Grudge",
    "KillFault",
    "Nemesis",
    "NemesisScheduler",
    "Net",
    "NoopNemesis",
    "PacketLossFault",
    "PartitionFault",
    "PartitionKillFault",
    "PauseFault",
    "PauseKillFault",
    "StaleLeaderFault",
    "build_nemesis",
    "complete_grudge",
    "cut_links",
    "describe_grudge",
    "fault_families",
    "make_faults",
    "make_grudge",
    "node_needs",
    "pick_targets",
    "simulate",
]

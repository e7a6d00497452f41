"""Systems under test behind one seam (docs/architecture.md): `System`, `NodeLifecycle`, `NodeNeeds`.

Only the seam is imported here; each system's module (kafka.py, ...) loads on `get_system`.
"""

from logquake.systems.base import (
    FEATURES,
    NODE_READS,
    SYSTEMS,
    Kill,
    NodeLifecycle,
    NodeNeeds,
    NodeSetup,
    NodeSpec,
    Pause,
    System,
    get_system,
)

__all__ = ["FEATURES", "NODE_READS", "SYSTEMS", "Kill", "NodeLifecycle", "NodeNeeds", "NodeSetup", "NodeSpec", "Pause", "System",
           "get_system"]

"""Systems under test behind one seam (docs/architecture.md): `System`, `NodeLifecycle`, `NodeNeeds`.

Only the seam is imported here; each system's module (kafka.py, ...) loads on `get_system`.
"""

from logquake.systems.base import (
    FEATURES,
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

__all__ = ["FEATURES", "SYSTEMS", "Kill", "NodeLifecycle", "NodeNeeds", "NodeSetup", "NodeSpec", "Pause", "System",
           "get_system"]

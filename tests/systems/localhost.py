"""`LocalHost`: a Host that is this machine itself, for tests of a system's lifecycle on 127.0.0.1.

A lab node without its namespaces: the lab already shares the harness's filesystem and pid
namespace, so only `exec` differs (no nsenter). A lifecycle's own tests need no separate
addresses, only distinct ports.
"""

from __future__ import annotations

from logquake.cluster.lab import LabHost


class LocalHost(LabHost):
    def __init__(self, name: str) -> None:
        super().__init__(name, holder_pid=0)

    def _enter(self) -> list[str]:
        return []

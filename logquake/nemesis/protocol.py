"""What a nemesis is, and what a fault needs from the nodes.

A `Nemesis` injects faults as start/stop pairs: `start(spec)` begins one fault and says in
plain words what it did, `stop()` ends the fault that is running, `heal()` undoes anything any
fault may have left, whatever the nemesis believes its state to be (it runs after crashes of
the schedule too). `setup`/`teardown` bracket a test. None of them records history: the
scheduler does, so every start and stop is an `info` op of process "nemesis".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from logquake.systems.base import NodeNeeds

__all__ = ["Nemesis", "Fault", "NoopNemesis"]


class Nemesis(Protocol):
    faults: Sequence[str]  # the fault families start() accepts, e.g. ("partition", "kill")

    def setup(self) -> None:
        """Prepare nodes (e.g. heal leftovers of an earlier run). Must not inject a fault."""
        ...

    def start(self, spec: str) -> str:
        """Begin fault `spec` ("partition" or "partition:majority"); return what was done."""
        ...

    def stop(self) -> str:
        """End the running fault (a no-op saying so when none runs); return what was done."""
        ...

    def heal(self) -> str:
        """Undo every fault of every family, idempotently; raises only when something stays broken."""
        ...

    def teardown(self) -> None:
        """Heal and release resources (threads); never raises."""
        ...


class Fault(Protocol):
    """One family of faults (partition, kill, ...), driven by the combined nemesis."""

    name: str
    needs: NodeNeeds  # what every node must provide for this family (a class attribute)
    variants: Sequence[str]  # drawn from at random when the spec names none
    accepts: Sequence[str]  # every variant a spec may name (`partition:leader`)

    def start(self, variant: str) -> str: ...

    def stop(self) -> str: ...

    def heal(self) -> None: ...


class NoopNemesis:
    """No faults: the schedule does nothing and heal has nothing to undo."""

    faults: Sequence[str] = ()

    def setup(self) -> None:
        pass

    def start(self, spec: str) -> str:
        return "no faults configured"

    def stop(self) -> str:
        return "no faults configured"

    def heal(self) -> str:
        return "nothing to heal"

    def teardown(self) -> None:
        pass

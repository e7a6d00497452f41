"""Which faults are in effect: a history's nemesis ops paired into fault intervals.

The nemesis records each fault as a `start-X` op and a `stop-X` op (X: partition, kill,
pause, clock, disk:power-loss, ...), and the final `heal` ends every fault (DESIGN.md §5).
The rules, written here once for the checker, the report and the live display:

- a fault of kind X is in effect from a start-X until the next stop-X or heal;
- a start-X while X is in effect begins nothing new: it joins that fault (a second target,
  or an imported Jepsen history's invocation then completion of one start), and what the
  fault is said to be is its latest start's value;
- a stop-X with no X in effect ends nothing; other nemesis ops are not boundaries.

`Faults` pairs the ops it is given, in history order, as they come (the live display adds
them one by one), and answers by bisection which were in effect before a time and which
nemesis ops fall in a window: the final-read checker asks that once per lost value.
Which ops to give it is the caller's: the checker leaves out nemesis invocations, the
report keeps them. Times are taken to grow, as a nemesis records its ops one at a time.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from logquake.history import Op

__all__ = ["HEAL", "START", "STOP", "Fault", "Faults"]

START, STOP, HEAL = "start-", "stop-", "heal"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fault:
    """One fault: from the start-X that began it to the stop-X or heal that ended it."""

    kind: str
    #: every start-X while it was in effect; the first began it
    starts: tuple[Op, ...]
    #: the stop-X or heal that ended it; None: never ended
    end: Op | None = None

    @property
    def start(self) -> Op:
        return self.starts[0]


class Faults:
    """The faults of a history's nemesis ops, given in history order (see the module docstring)."""

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self.ops: list[Op] = []
        self._times: list[int] = []  # the ops' times, never decreasing (a running maximum): bisected
        self._after: list[tuple[Op, ...]] = []  # per op: the latest start of each fault in effect after it
        self._open: dict[str, list[Op]] = {}  # kind -> its starts, for the faults in effect, in order begun
        self._ended: list[Fault] = []
        for op in ops:
            self.add(op)

    def add(self, op: Op) -> None:
        """The next nemesis op of the history."""
        f = op.f
        if f.startswith(START):
            self._open.setdefault(f[len(START):], []).append(op)
        elif f.startswith(STOP):
            self._end(f[len(STOP):], op)
        elif f == HEAL:
            for kind in list(self._open):
                self._end(kind, op)
        self.ops.append(op)
        self._times.append(max(op.time, self._times[-1]) if self._times else op.time)
        self._after.append(tuple(starts[-1] for starts in self._open.values()))

    def _end(self, kind: str, op: Op) -> None:
        starts = self._open.pop(kind, None)
        if starts is not None:
            self._ended.append(Fault(kind=kind, starts=tuple(starts), end=op))

    def in_effect(self) -> dict[str, Op]:
        """The faults in effect after the last op: kind -> its latest start, in the order begun.

        Safe to call from another thread than the one adding (the live display's): the
        mapping is copied in one step before it is read.
        """
        return {kind: starts[-1] for kind, starts in dict(self._open).items()}

    def intervals(self) -> list[Fault]:
        """Every fault, by start time; those still in effect have no end."""
        still = [Fault(kind=kind, starts=tuple(starts)) for kind, starts in dict(self._open).items()]
        return sorted([*self._ended, *still], key=lambda fault: fault.start.time)

    def in_effect_before(self, t: int) -> list[Op]:
        """The faults begun before `t` and not ended before it, each as its latest start
        before `t`, in the order begun."""
        i = bisect_left(self._times, t)
        return list(self._after[i - 1]) if i else []

    def between(self, t0: int, t1: int) -> list[Op]:
        """The nemesis ops from `t0` to `t1` (both included), in history order."""
        return self.ops[bisect_left(self._times, t0):bisect_right(self._times, t1)]

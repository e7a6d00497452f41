"""When faults start and stop: a pure flip-flop schedule, and the thread that follows it.

`FlipFlop` is Jepsen's combined-nemesis schedule as a pure object with time passed in: start
a random fault, wait, stop it, wait, start another... each wait uniform in [0, 2*interval)
so the mean is `interval`; with `until`, no fault starts at or after `until` s (the main
phase's time limit bounds the faults too; one running then is still stopped). `simulate` runs it without a clock, which is how it is tested.
`NemesisScheduler` follows the same schedule on the wall clock in a thread and records every
start and stop as an `info` op of process "nemesis"; `stop_and_heal` ends it and runs the
final heal, which never raises (a failure is logged and recorded, and analysis goes on).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from logquake.faults import HEAL, START, STOP
from logquake.history import INFO, NEMESIS, Op
from logquake.nemesis.protocol import Nemesis

__all__ = ["Action", "FlipFlop", "simulate", "NemesisScheduler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Action:
    at: float  # seconds since the schedule began
    kind: str  # "start" | "stop"
    fault: str


class FlipFlop:
    """Alternating start/stop of faults chosen from `faults`, at random intervals."""

    def __init__(self, faults: Sequence[str], *, interval: float, rng: random.Random,
                 until: float | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.faults = list(faults)
        self.until = until
        self.interval = interval
        self.rng = rng
        self.running: str | None = None
        self._due = self._wait(0.0)

    def _wait(self, now: float) -> float:
        return now + self.rng.uniform(0, 2 * self.interval)

    def next_action(self) -> Action | None:
        """The next action (not yet taken); None when there are no faults or none may start."""
        if not self.faults:
            return None
        if self.running is not None:
            return Action(at=self._due, kind="stop", fault=self.running)
        if self.until is not None and self._due >= self.until:
            return None
        return Action(at=self._due, kind="start", fault=self._peek_fault())

    def _peek_fault(self) -> str:
        state = self.rng.getstate()
        fault = self.rng.choice(self.faults)
        self.rng.setstate(state)
        return fault

    def advance(self, action: Action) -> None:
        """Mark `action` as taken (at its due time) and schedule the next one."""
        if action.kind == "start":
            self.rng.choice(self.faults)  # consume the draw next_action peeked at
            self.running = action.fault
        else:
            self.running = None
        self._due = self._wait(action.at)


def simulate(faults: Sequence[str], *, interval: float, seed: int, until: float,
             time_limit: float | None = None) -> list[Action]:
    """Every action the schedule takes before `until` seconds, with no clock involved; with
    `time_limit`, as NemesisScheduler follows it for a main phase of that many seconds."""
    ff = FlipFlop(faults, interval=interval, rng=random.Random(seed), until=time_limit)
    out = []
    while (a := ff.next_action()) is not None and a.at < until:
        out.append(a)
        ff.advance(a)
    return out


class NemesisScheduler:
    """Runs a FlipFlop over `nemesis` in a thread; see the module docstring."""

    def __init__(self, nemesis: Nemesis, *, interval: float, rng: random.Random, record: Callable[[Op], Op],
                 clock: Callable[[], float] = time.monotonic, until: float | None = None) -> None:
        self.nemesis = nemesis
        self.record = record
        self.clock = clock
        self.flipflop = FlipFlop(list(nemesis.faults), interval=interval, rng=rng, until=until)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one nemesis call at a time (schedule vs final heal)
        self.errors: list[str] = []

    def start(self) -> None:
        if self._thread is not None or not self.nemesis.faults:
            return
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = self.clock()
        while (action := self.flipflop.next_action()) is not None:
            if self._stop.wait(max(0.0, action.at - (self.clock() - t0))):
                return
            with self._lock:
                if self._stop.is_set():
                    return
                self._act(action)
            self.flipflop.advance(action)

    def _act(self, action: Action) -> None:
        f = (START if action.kind == "start" else STOP) + action.fault
        try:
            value = self.nemesis.start(action.fault) if action.kind == "start" else self.nemesis.stop()
            self._record(f, value)
        except Exception as e:  # a fault that failed to apply is history, not a crash of the run
            log.warning("nemesis %s failed: %s", f, e)
            self.errors.append(f"{f}: {e}")
            self._record(f, None, error=str(e))

    def _record(self, f: str, value: object, **extra: object) -> None:
        try:
            self.record(Op(process=NEMESIS, type=INFO, f=f, value=value, extra=dict(extra)))
        except Exception as e:
            log.warning("could not record nemesis op %s: %s", f, e)

    def stop_and_heal(self, *, timeout: float = 120.0) -> bool:
        """Stop the schedule, stop a running fault, heal everything. True when the heal worked."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            running = self.flipflop.running
            if running is not None:
                self._act(self.flipflop.next_action() or Action(at=0, kind="stop", fault=running))
                self.flipflop.running = None
            try:
                value = self.nemesis.heal()
            except Exception as e:
                log.error("final heal failed (analysis continues): %s", e)
                self.errors.append(f"{HEAL}: {e}")
                self._record(HEAL, None, error=str(e))
                return False
            self._record(HEAL, value)
            return True

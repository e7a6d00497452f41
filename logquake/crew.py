"""The machinery that runs a workload's ops: threads, pacing, timeouts, recording.

`Crew` holds `concurrency` `Worker`s, each a thread with one client that asks the generator
what to do, invokes it and records both ends through the `Recorder` (which stamps time and
streams to history.jsonl); a `Pacer` spaces op starts over all workers; a `Watchdog` turns a
call hung past its timeout into `info` and hands the worker's place to a successor with a
fresh client, as Jepsen's client timeout does. Which phase runs when is the runner's.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from logquake.config import TestConfig
from logquake.faults import Faults
from logquake.history import FAIL, INFO, NEMESIS, OK, HistoryWriter, Op
from logquake.workloads import Context, Generator
from logquake.workloads.client import Abandonable, Client, complete

log = logging.getLogger("logquake.runner")  # the runner's: harness.log names the run's lines alike

# A hung client call becomes info after this long (the adapters bound their own waits at
# ~10 s, a transaction's commit plus abort at ~20 s).
CALL_TIMEOUT = 30.0
# Closing the clients at teardown, all at once; a close still running then is left behind.
CLOSE_TIMEOUT = 20.0


@dataclass
class Stats:
    """Live counters for the display (written by workers, read by the display), and what the
    final summary says of the run: each phase's duration, the main phase's own ops, the faults
    by kind with how long they were on (by the history's clock, as the report says it)."""

    phase: str = "setup"
    ok: int = 0
    info: int = 0
    fail: int = 0
    started: float = field(default_factory=time.monotonic)
    #: (phase, monotonic time it began), in order; the first is "setup" at creation.
    entered: list[tuple[str, float]] = field(default_factory=lambda: [("setup", time.monotonic())])
    #: client ops completed in the main phase and its length, once it is over
    main_ops: int | None = None
    main_seconds: float | None = None
    _faults: Faults = field(default_factory=Faults)
    _main_base: int = 0

    @property
    def done(self) -> int:
        return self.ok + self.info + self.fail

    def enter(self, phase: str) -> None:
        """Start a phase (the display shows it, harness.log records when)."""
        log.info("phase %s", phase)
        now = time.monotonic()
        if self.phase == "main" and phase != "main":
            self.main_ops = self.done - self._main_base
            self.main_seconds = now - self.entered[-1][1]
        if phase == "main":
            self._main_base = self.done
        self.phase = phase
        self.entered.append((phase, now))

    def durations(self) -> list[tuple[str, float]]:
        """Seconds spent in each phase so far, in order (a phase entered twice counts once)."""
        out: dict[str, float] = {}
        ends = [t for _, t in self.entered[1:]] + [time.monotonic()]
        for (phase, begun), end in zip(self.entered, ends, strict=True):
            out[phase] = out.get(phase, 0.0) + end - begun
        return list(out.items())

    def main_rate(self) -> float | None:
        """Mean client ops/s over the main phase, once it is over."""
        if self.main_ops is None or not self.main_seconds:
            return None
        return self.main_ops / self.main_seconds

    @property
    def faults(self) -> dict[str, str]:
        """The faults in effect: kind -> what its latest start said."""
        return {kind: str(start.value) for kind, start in self._faults.in_effect().items()}

    @property
    def fault_starts(self) -> dict[str, int]:
        """start-X ops by kind."""
        out: dict[str, int] = {}
        for f in self._faults.intervals():
            out[f.kind] = out.get(f.kind, 0) + len(f.starts)
        return out

    @property
    def fault_seconds(self) -> dict[str, float]:
        """Seconds each kind was in effect, over the faults that have ended."""
        out: dict[str, float] = {}
        for f in self._faults.intervals():
            if f.end is not None:
                out[f.kind] = out.get(f.kind, 0.0) + (f.end.time - f.start.time) / 1e9
        return out

    def count(self, op: Op) -> None:
        if op.process == NEMESIS:
            self._faults.add(op)
        elif op.type == OK:
            self.ok += 1
        elif op.type == INFO:
            self.info += 1
        elif op.type == FAIL:
            self.fail += 1


class Recorder:
    """Stamps ops with ns since the test began and streams them to history.jsonl."""

    def __init__(self, writer: HistoryWriter, stats: Stats) -> None:
        self.writer = writer
        self.stats = stats
        self.t0 = time.monotonic_ns()
        self.closed = False

    def record(self, op: Op) -> Op:
        op = replace(op, time=time.monotonic_ns() - self.t0)
        if self.closed:  # a straggler after the history was closed: not part of this run
            return op
        op = self.writer.write(op)
        self.stats.count(op)
        return op

    def close(self) -> None:
        self.closed = True
        self.writer.close()


class Pacer:
    """Spaces op starts 1/rate s apart over all workers (a shared schedule of slots)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until this caller's slot; False if `stop` was set meanwhile."""
        with self._lock:
            now = time.monotonic()
            # Never bank more than one slot of idle time: no bursts after a slow stretch.
            slot = max(self._next, now - self.interval)
            self._next = slot + self.interval
        delay = slot - time.monotonic()
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()


class Worker:
    """One client thread: asks the generator, invokes, records; a new process after info.

    A call that hangs past CALL_TIMEOUT is completed as info by the crew's watchdog, which
    then abandons this worker (its thread exits when the call returns, recording nothing)
    and starts a successor with a fresh client, as Jepsen's client timeout does. Watching
    from one thread costs nothing per op, unlike handing every call to a helper thread.
    """

    def __init__(self, index: int, process: int, crew: Crew) -> None:
        self.index = index
        self.process = process
        self.crew = crew
        self.client: Client | None = None
        self.abandoned = False
        self.broken = False

    def _ensure_client(self, stop: threading.Event) -> bool:
        while self.client is None:
            client = self.crew.make()
            try:
                client.open(self.crew.bootstrap)
                self.client = client
            except Exception as e:  # noqa: BLE001 - a client that cannot connect yet: retry
                log.warning("worker %d: could not open a client: %s", self.index, e)
                _close_aside(client)
                if stop.wait(1.0):
                    return False
        return True

    def drop_client(self) -> None:
        if self.client is not None:
            _close_aside(self.client)
            self.client = None
            self.broken = False
            with self.crew.gen_lock:
                self.crew.gen.fresh_client(self.index)

    def run(self, phase: str, stop: threading.Event, pacer: Pacer | None) -> None:
        """Run ops of `phase` until `stop` is set or the generator has nothing left."""
        while not stop.is_set() and not self.abandoned:
            if not self._ensure_client(stop):
                return
            if pacer is not None and not pacer.wait(stop):
                return
            ctx = Context(worker=self.index, process=self.process, phase=phase)
            with self.crew.gen_lock:
                op = self.crew.gen.op(ctx)
            if op is None:
                return
            self.step(ctx, op)

    def step(self, ctx: Context, op: Op) -> Op | None:
        """Invoke one op and record both ends; the completion, or None if the call timed out."""
        assert self.client is not None
        crew = self.crew
        inv = crew.recorder.record(op)
        crew.watchdog.arm(self, ctx, inv)
        try:
            done = self.client.invoke(inv)
        except Exception as e:  # noqa: BLE001 - an adapter bug must not leave the op dangling
            log.error("worker %d: client raised on %s:\n%s", self.index, inv.f, traceback.format_exc())
            done = complete(inv, INFO, inv.value, error=f"{type(e).__name__}: {e}")
            self.broken = True
        if not crew.watchdog.disarm(self):
            # The watchdog took this call: it records the info completion and starts a
            # successor. Stop here, before the watchdog thread gets to say so: one more op
            # under this process would be invoked while the timed-out one is in flight.
            self.abandoned = True
            return None
        done = crew.recorder.record(replace(done, process=inv.process, f=inv.f))
        with crew.gen_lock:
            crew.gen.update(ctx, done)
        if done.type == INFO:
            self.process += crew.cfg.concurrency
        if done.f == "crash" or self.broken:
            self.drop_client()
        return done


def _close_aside(client: Client) -> threading.Thread:
    """Close a client on a daemon thread: closing under a hung call may block."""
    t = threading.Thread(target=client.close, daemon=True, name="client-close")
    t.start()
    return t


class Watchdog:
    """Completes calls that run past `timeout` as info and hands the worker's place on."""

    def __init__(self, timeout: float, on_expire: Callable[[Worker, Context, Op], None]) -> None:
        self.timeout = timeout
        self.on_expire = on_expire
        self._armed: dict[int, tuple[float, Worker, Context, Op]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="watchdog")
        self._thread.start()

    def arm(self, w: Worker, ctx: Context, inv: Op) -> None:
        with self._lock:
            self._armed[id(w)] = (time.monotonic() + self.timeout, w, ctx, inv)

    def disarm(self, w: Worker) -> bool:
        """False if the call had already expired (the worker must then stop)."""
        with self._lock:
            return self._armed.pop(id(w), None) is not None

    def _watch(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                expired = [e for e in self._armed.values() if e[0] <= now]
                for _, w, _, _ in expired:
                    del self._armed[id(w)]
            for _, w, ctx, inv in expired:
                self.on_expire(w, ctx, inv)

    def close(self) -> None:
        self._stop.set()


class Crew:
    """The workers of a run, their threads, and what they share."""

    def __init__(self, cfg: TestConfig, gen: Generator, recorder: Recorder, bootstrap: str,
                 make: Callable[[], Client], *, call_timeout: float | None = None) -> None:
        self.cfg = cfg
        self.gen = gen
        self.gen_lock = threading.Lock()
        self.recorder = recorder
        self.bootstrap = bootstrap
        self.make = make
        self.workers = [Worker(i, i, self) for i in range(cfg.concurrency)]
        self.threads: list[tuple[threading.Thread, Worker]] = []
        self._lock = threading.Lock()
        self._phase: tuple[str, threading.Event, Pacer | None] | None = None
        self.watchdog = Watchdog(call_timeout or CALL_TIMEOUT, self._expired)

    def _spawn(self, w: Worker) -> None:
        assert self._phase is not None
        t = threading.Thread(target=w.run, args=self._phase, name=f"worker-{w.index}", daemon=True)
        self.threads.append((t, w))
        t.start()

    def start(self, phase: str, stop: threading.Event, pacer: Pacer | None) -> None:
        with self._lock:
            self._phase = (phase, stop, pacer)
            self.threads = []
            for w in self.workers:
                self._spawn(w)

    def _expired(self, w: Worker, ctx: Context, inv: Op) -> None:
        log.warning("worker %d: %s still running after %.0f s: info, fresh client", w.index, inv.f,
                    self.watchdog.timeout)
        w.abandoned = True
        done = self.recorder.record(complete(inv, INFO, inv.value, error="timeout"))
        with self.gen_lock:
            self.gen.update(ctx, done)
            self.gen.fresh_client(w.index)
        if isinstance(w.client, Abandonable):
            w.client.abandon()  # before the successor opens: it takes over (and fences) the txn id
        successor = Worker(w.index, w.process + self.cfg.concurrency, self)
        if w.client is not None:
            _close_aside(w.client)
            w.client = None
        with self._lock:
            self.workers[w.index] = successor
            self._spawn(successor)

    def _alive(self) -> list[threading.Thread]:
        """Threads of the phase still running, successors included, abandoned ones not."""
        with self._lock:
            return [t for t, w in self.threads if t.is_alive() and not w.abandoned]

    def join(self, timeout: float) -> None:
        """Wait for the phase's threads, at most `timeout` s."""
        deadline = time.monotonic() + timeout
        while (alive := self._alive()) and time.monotonic() < deadline:
            alive[0].join(min(0.2, max(0.0, deadline - time.monotonic())))

    def alive(self) -> bool:
        return bool(self._alive())

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Close every worker's client at once, waiting at most `timeout` s in all.

        A library's close can block without end (a consumer leaving a group whose coordinator
        does not answer); such a close is left running on its daemon thread, logged.
        """
        self.watchdog.close()
        closing = []
        for w in self.workers:
            if w.client is not None:
                client, w.client = w.client, None
                closing.append((w.index, _close_aside(client)))
        deadline = time.monotonic() + timeout
        for _, t in closing:
            t.join(max(0.0, deadline - time.monotonic()))
        if stuck := [i for i, t in closing if t.is_alive()]:
            log.warning("teardown: the clients of workers %s still closing after %.0f s: left behind", stuck, timeout)

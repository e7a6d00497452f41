"""One test, start to finish. This module alone knows the phases; in order:

1. resolve   the config gets a concrete seed (TestConfig.with_seed)
2. store     results/<name>/<start>/ with test.json, harness.log, history.jsonl (opened)
3. cluster   open_cluster(cfg, run_dir) and wait until the brokers answer
4. main      `concurrency` workers (threads, one client each, rate-limited over all) run
             the queue generator for `time_limit` s while the NemesisScheduler flips faults
5. heal      the scheduler stops and heals everything (also in `finally`)
6. recovery  wait `recovery_time` s for leaders to settle
7. drain     every worker assigns all keys from the beginning and polls up to the highest
             known offset of every key, for at most `drain_time` s
8. teardown  clients closed, node logs collected, nemesis torn down, cluster closed (`finally`)
9. history   closed and fsynced: on disk before any analysis
10. analyse  check_history -> results.json, junit.xml, report.html (if the report module is there)
11. latest   results/latest points at this run

Ctrl-C (SIGINT) ends the main phase early and skips recovery and drain; heal, teardown and
analysis of what was recorded still run. A second Ctrl-C aborts the in-flight ops' wait.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logquake.config import TestConfig, save_config
from logquake.errors import LogquakeError
from logquake.history import FAIL, INFO, NEMESIS, OK, HistoryWriter, Op, load_history
from logquake.results import store
from logquake.systems import Kill, NodeLifecycle, NodeNeeds
from logquake.workloads import DRAIN, MAIN, Context, QueueGenerator, make_client, make_generator
from logquake.workloads.client import Abandonable, Client, complete
from logquake.workloads.profiles import apply_profile, describe

if TYPE_CHECKING:
    from logquake.cluster import Cluster, Host

log = logging.getLogger("logquake.runner")

# A hung client call becomes info after this long (the adapters bound their own waits at
# ~10 s, a transaction's commit plus abort at ~20 s).
CALL_TIMEOUT = 30.0
# Closing the clients at teardown, all at once; a close still running then is left behind.
CLOSE_TIMEOUT = 20.0
# Past a phase's own bound by this much, every thread's stack is dumped to harness.log.
BOUND_SLACK = 15.0
# s a bound's Python stack dump may wait for the GIL before faulthandler's C dump goes instead
DUMP_GRACE = 2.0
EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_COULD_NOT_RUN = 0, 1, 2, 3


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """What a finished run produced."""

    run_dir: Path
    results: dict[str, Any]
    interrupted: bool = False

    @property
    def valid(self) -> bool | str:
        return self.results.get("valid", "unknown")

    @property
    def exit_code(self) -> int:
        v = self.valid
        return EXIT_VALID if v is True else EXIT_INVALID if v is False else EXIT_UNKNOWN


# -- recording --------------------------------------------------------------------------


@dataclass
class Stats:
    """Live counters for the display (written by workers, read by the display)."""

    phase: str = "setup"
    ok: int = 0
    info: int = 0
    fail: int = 0
    faults: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def enter(self, phase: str) -> None:
        """Start a phase (the display shows it, harness.log records when)."""
        log.info("phase %s", phase)
        self.phase = phase

    def count(self, op: Op) -> None:
        if op.process == NEMESIS:
            name = op.f.split("-", 1)[-1]
            if op.f.startswith("start-"):
                self.faults[name] = str(op.value)
            elif op.f.startswith("stop-"):
                self.faults.pop(name, None)
            elif op.f == "heal":
                self.faults.clear()
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


# -- workers ----------------------------------------------------------------------------


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

    def __init__(self, cfg: TestConfig, gen: QueueGenerator, recorder: Recorder, bootstrap: str,
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


# -- the seams to other subpackages ----------------------------------------------------


@dataclass
class StaticCluster:
    """A `Cluster` given only by bootstrap servers (a log in this process): no nodes to fault,
    nothing to set up, wait for or tear down."""

    bootstrap_servers: str
    nodes: list[str] = field(default_factory=list)
    hosts: dict[str, Host] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    lifecycle: Any = None  # nodes of its own, if a test gives it some
    needs: NodeNeeds = NodeNeeds()
    harness_address: str = ""
    iptables: str = "iptables"
    python: str = sys.executable

    def wait_ready(self, timeout: float = 60.0) -> None:
        return None

    def leaders(self, *, timeout: float = 5.0) -> dict[str, str]:
        return {}

    def collect_logs(self, dest_dir: Path) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> StaticCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@contextlib.contextmanager
def open_cluster(cfg: TestConfig, run_dir: Path) -> Iterator[Cluster]:
    """The cluster under test, its nodes given what the test's faults need, torn down on exit
    whatever happens."""
    from logquake.cluster import open_cluster as _open
    from logquake.nemesis import node_needs

    with contextlib.closing(_open(cfg, run_dir, needs=node_needs(cfg.nemesis))) as cluster:
        yield cluster


def check(ops: list[Op], cfg: TestConfig) -> dict[str, Any]:
    """The checker's verdict; a missing or crashing checker gives `unknown`, with the reason."""
    try:
        from logquake.checker import CheckOptions, check_history
    except ImportError as e:
        return {"valid": "unknown", "error": f"the checker is not available: {e}", "anomalies": {}}
    # The guarantee profile (workloads/profiles.py) set the client configs in run_test;
    # the same profile decides here which anomaly types are bad.
    opts = CheckOptions(sub_via=cfg.sub_via, txn=cfg.txn, ww_deps=cfg.ww_deps, ignore=cfg.ignore,
                        guarantee=cfg.guarantee)
    try:
        if cfg.workload == "pipeline":
            from logquake.checker.pipeline import check_pipeline

            return check_pipeline(ops, guarantee=cfg.guarantee)
        if cfg.workload == "offsets":  # committed offsets are registers: linearizability
            from logquake.workloads import offsets

            return offsets.analyse(ops, offsets.offset_keys(cfg))
        return check_history(ops, opts)
    except Exception as e:  # noqa: BLE001 - an analysis that raises is unknown, error attached
        log.error("checker raised:\n%s", traceback.format_exc())
        return {"valid": "unknown", "error": f"checker raised {type(e).__name__}: {e}", "anomalies": {}}


def write_report(run_dir: Path) -> Path | None:
    """report.html through logquake.results.write_report (the report's owner), if present."""
    try:
        from logquake.results import write_report as _write
    except ImportError:
        return None
    try:
        return _write(run_dir)
    except Exception:  # noqa: BLE001 - a broken report never hides the verdict
        log.error("report failed:\n%s", traceback.format_exc())
        return None


# -- the run ----------------------------------------------------------------------------


class _Interrupt:
    """First SIGINT sets `stop` (graceful); a second one raises KeyboardInterrupt."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.hits = 0
        self._old: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.hits += 1
        if self.hits > 1:
            raise KeyboardInterrupt
        log.warning("interrupted: stopping the run gracefully (heal, teardown, analysis)")
        self.stop.set()

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def run_test(
    cfg: TestConfig,
    *,
    stats: Stats | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
    stop: threading.Event | None = None,
    make: Callable[[TestConfig], Client] = make_client,
    cluster: Callable[[TestConfig, Path], contextlib.AbstractContextManager[Any]] | None = None,
) -> RunOutcome:
    """Run one whole test (the phases of the module docstring) and store its results.

    Raises LogquakeError (after cleaning up) when the test could not run at all, e.g. the
    cluster did not come up. `stats` is updated live for a display; `stop` ends the run early
    as Ctrl-C does; `make` builds a fresh client (the configured library by default);
    `cluster` opens the cluster (open_cluster by default).
    """
    cfg = apply_profile(cfg.with_seed())
    profile = describe(cfg)
    stats = stats or Stats()
    stop = stop or threading.Event()
    run_dir = store.create_run_dir(cfg.results_dir, cfg.name)
    if on_run_dir is not None:
        on_run_dir(run_dir)
    handler = store.attach_harness_log(run_dir)
    dumps = StackDumps(run_dir / store.HARNESS_LOG)
    started = time.monotonic()
    try:
        log.info("run %s seed=%s dir=%s", cfg.name, cfg.seed, run_dir)
        log.info("guarantee %s: producer %s; consumer %s; offsets committed %s", profile["guarantee"],
                 profile["producer_config"], profile["consumer_config"], profile["offset_commit"])
        save_config(cfg, run_dir / store.TEST, run_dir=str(run_dir), start_time=time.time(), profile=profile)
        writer = HistoryWriter(run_dir / store.HISTORY)
        recorder = Recorder(writer, stats)
        with _Interrupt(stop) as intr:
            try:
                drain = _run_phases(cfg, run_dir, recorder, stats, stop, make, cluster or open_cluster, dumps)
            finally:
                recorder.close()  # phase 9: the history is on disk before analysis
            interrupted = intr.hits > 0
        stats.enter("analyse")
        results = with_drain(check(load_history(run_dir / store.HISTORY), cfg), drain)
        if interrupted:
            results["interrupted"] = True
        store.write_results(run_dir, results)
        store.write_junit(run_dir, results, name=cfg.name, duration=time.monotonic() - started)
        write_report(run_dir)
        store.update_latest(cfg.results_dir, run_dir)
        stats.enter("done")
        log.info("verdict: valid=%s", results.get("valid"))
        return RunOutcome(run_dir=run_dir, results=results, interrupted=interrupted)
    except LogquakeError as e:
        log.error("the test could not run: %s", e)
        with contextlib.suppress(Exception):
            store.update_latest(cfg.results_dir, run_dir)
        raise
    finally:
        dumps.close()
        store.detach_harness_log(handler)


class StackDumps:
    """Every thread's stack appended to harness.log: on `kill -USR1 <pid>`, and unasked when
    a phase outlives its bound (`bound`).

    Written from Python, holding the GIL: no thread can change its frames while they are
    read. faulthandler's C dump reads them without the GIL and can crash the process while
    other threads run (a bound dump did, in the suite), so it is only the fallback, armed
    DUMP_GRACE s after a bound: if a library call holds the GIL (confluent-kafka's assign,
    subscribe and unsubscribe wait on librdkafka holding it), the Python dump cannot run,
    and neither can any other Python code, so the C dump is then the safe one and names the
    call. `kill -USR1` asks for the Python dump, `kill -USR2` for the C one (for a run whose
    USR1 writes nothing: a call holds the GIL). The signals are the main thread's to set;
    elsewhere (tests) only the bounds dump.
    """

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held until close()
        self._lock = threading.RLock()  # RLock: the signal handler may interrupt a dump
        self._closed = False
        self._signal = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1")
        if self._signal:
            self._previous = signal.signal(signal.SIGUSR1, lambda signum, frame: self.dump("SIGUSR1"))
            # When USR1 writes nothing (a call holds the GIL), USR2 asks for the C dump outright.
            faulthandler.register(signal.SIGUSR2, file=self._f, all_threads=True)

    def dump(self, why: str) -> None:
        """Every thread's stack, in faulthandler's layout, under a `why!` line."""
        names = {t.ident: t.name for t in threading.enumerate()}
        lines = [f"{why}!"]
        for ident, frame in sys._current_frames().items():
            lines.append(f"\nThread 0x{ident:016x} [{names.get(ident, '?')}] (most recent call first):")
            lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}'
                      for f in traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)]
        with self._lock:
            if not self._closed:
                self._f.write("\n".join(lines) + "\n\n")
                self._f.flush()

    @contextlib.contextmanager
    def bound(self, what: str, seconds: float) -> Iterator[None]:
        """Dump every stack once if the block is still running after `seconds`."""
        log.info("%s bounded at %.0f s (past it, every thread's stack is dumped here)", what, seconds)
        faulthandler.dump_traceback_later(seconds + DUMP_GRACE, file=self._f)
        timer = threading.Timer(seconds, self._past_bound, args=(what, seconds))
        timer.daemon, timer.name = True, "stack-dump"
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()

    def _past_bound(self, what: str, seconds: float) -> None:
        faulthandler.cancel_dump_traceback_later()  # the GIL was free: the safe dump goes instead
        self.dump(f"Timeout ({what} still running after its bound of {seconds:.1f} s)")

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self._signal:
            signal.signal(signal.SIGUSR1, self._previous)
            faulthandler.unregister(signal.SIGUSR2)
        with self._lock:
            self._closed = True
            self._f.close()


def _run_phases(
    cfg: TestConfig, run_dir: Path, recorder: Recorder, stats: Stats, stop: threading.Event,
    make: Callable[[TestConfig], Client],
    opener: Callable[[TestConfig, Path], contextlib.AbstractContextManager[Any]],
    dumps: StackDumps,
) -> dict[str, Any] | None:
    """Phases 3-8; every exit path heals and tears down. What the drain reached (None if none ran)."""
    assert cfg.seed is not None
    stats.enter("cluster")
    with opener(cfg, run_dir) as cluster:
        crew: Crew | None = None
        nemesis = scheduler = None
        try:
            cluster.wait_ready(120.0)
            if cfg.workload == "offsets":
                from logquake.workloads import offsets

                mk = offsets.make_client if make is make_client else make
                crew = Crew(cfg, offsets.make_generator(cfg), recorder, cluster.bootstrap_servers, lambda: mk(cfg))
            elif cfg.workload != "pipeline":
                crew = Crew(cfg, make_generator(cfg), recorder, cluster.bootstrap_servers, lambda: make(cfg))
            if cfg.nemesis:
                from logquake.nemesis import NemesisScheduler, build_nemesis

                nemesis = build_nemesis(cfg, cluster)
                nemesis.setup()
                scheduler = NemesisScheduler(
                    nemesis, interval=cfg.nemesis_interval, rng=random.Random(f"schedule-{cfg.seed}"),
                    record=recorder.record,
                )
            if crew is None:
                _pipeline(cfg, cluster.bootstrap_servers, recorder, scheduler, stats, stop)
                scheduler = None  # healed inside
                return None
            with dumps.bound("main phase", cfg.time_limit + CALL_TIMEOUT + BOUND_SLACK):
                _main_phase(cfg, crew, scheduler, stats, stop)
            _heal(scheduler, stats)
            scheduler = None
            if not stop.is_set():
                stats.enter("recovery")
                stop.wait(cfg.recovery_time)
            if stop.is_set():
                return None
            down = _brokers_down(cluster)
            with dumps.bound("drain", cfg.drain_time + CALL_TIMEOUT + BOUND_SLACK):
                drain = _drain_phase(cfg, crew, stats, stop)
            down.update(_brokers_down(cluster))
            if down:
                log.error("brokers down after the heal: %s", down)
                drain = {**(drain or {}), "brokers_down": down}
            return drain
        finally:
            _heal(scheduler, stats)
            stats.enter("teardown")
            if crew is not None:
                with dumps.bound("closing the clients", CLOSE_TIMEOUT + BOUND_SLACK):
                    crew.close(CLOSE_TIMEOUT)
            if nemesis is not None:
                with _logged("nemesis teardown"):
                    nemesis.teardown()
            with _logged("collecting node logs"):
                cluster.collect_logs(run_dir / store.NODES)


def _main_phase(cfg: TestConfig, crew: Crew, scheduler: Any, stats: Stats, stop: threading.Event) -> None:
    stats.enter(MAIN)
    stats.started = time.monotonic()
    phase_over = threading.Event()
    if scheduler is not None:
        scheduler.start()
    crew.start(MAIN, phase_over, Pacer(cfg.rate))
    deadline = time.monotonic() + cfg.time_limit
    while not stop.is_set() and time.monotonic() < deadline:
        stop.wait(min(0.2, max(0.0, deadline - time.monotonic())))
    phase_over.set()
    crew.join(CALL_TIMEOUT + 5)


def _pipeline(cfg: TestConfig, bootstrap: str, recorder: Recorder, scheduler: Any, stats: Stats,
              stop: threading.Event) -> None:
    """The pipeline workload: inputs and workers under faults, heal, recovery, drain."""
    from logquake.workloads.pipeline import History, run_pipeline
    from logquake.workloads.profiles import get_profile

    def during() -> None:
        stats.enter(MAIN)
        stats.started = time.monotonic()
        if scheduler is not None:
            scheduler.start()
        stop.wait(cfg.time_limit)
        _heal(scheduler, stats)
        stats.enter("recovery")
        stop.wait(cfg.recovery_time)
        stats.enter(DRAIN)

    run_pipeline(bootstrap, get_profile(cfg.guarantee), keys=max(cfg.partitions, 4),
                 values=max(1, int(cfg.rate * cfg.time_limit)), workers=cfg.concurrency,
                 hist=History(sink=recorder.record), rate=cfg.rate, during=during,
                 timeout=max(60.0, cfg.time_limit))


def _heal(scheduler: Any, stats: Stats) -> None:
    if scheduler is None:
        return
    stats.enter("heal")
    with _logged("final heal"):
        scheduler.stop_and_heal()


def _drain_phase(cfg: TestConfig, crew: Crew, stats: Stats, stop: threading.Event) -> dict[str, Any] | None:
    """Phase 7, at most drain_time s plus one call's timeout; which workers read everything."""
    stats.enter(DRAIN)
    over = threading.Event()
    # Fresh clients: the drain asks what the log holds, not what a client that lived
    # through the faults still believes (a librdkafka instance can sit in backoff).
    for w in crew.workers:
        w.drop_client()
    crew.start(DRAIN, over, None)
    deadline = time.monotonic() + cfg.drain_time
    while crew.alive() and not stop.is_set() and time.monotonic() < deadline:
        stop.wait(0.2)
    over.set()
    crew.join(CALL_TIMEOUT + 5)
    drained = getattr(crew.gen, "drained", None)  # the queue generator's; other workloads say nothing
    if drained is None:
        return None
    with crew.gen_lock:
        short = [w.index for w in crew.workers if not drained(w.index)]
    if short:
        log.warning("drain: workers %s did not read up to every key's highest known offset within %.0f s",
                    short, cfg.drain_time)
    # Each worker reads every key from the beginning: one that got through read everything.
    return {"complete": len(short) < len(crew.workers), "workers_short": short}


def _brokers_down(cluster: Cluster) -> dict[str, str]:
    """Nodes whose process is gone (node -> the last line it printed), where the system can
    tell (its lifecycle has `Kill`); {} elsewhere."""
    lifecycle = cluster.lifecycle
    if not isinstance(lifecycle, Kill):
        return {}
    down = {}
    for node in cluster.nodes:
        with _logged(f"checking broker {node}"):
            if not lifecycle.is_up(node):
                down[node] = _last_output_line(lifecycle, node)
    return down


def _last_output_line(lifecycle: NodeLifecycle, node: str) -> str:
    """The last line the node's process printed (the first of its logs, readable here in the lab), or ''."""
    logs = lifecycle.logs(node)
    try:
        lines = Path(logs[0]).read_text(errors="replace").strip().splitlines() if logs else []
    except OSError:
        return ""
    return lines[-1] if lines else ""


def with_drain(results: dict[str, Any], drain: dict[str, Any] | None) -> dict[str, Any]:
    """The verdict, knowing what the drain read and whether every broker was up for it.

    Values nobody read are `unseen`; when no drain worker got through, or brokers had died
    (a drain against a dead cluster reads nothing), that proves nothing: a verdict resting on
    unseen alone is unknown, and so is a valid one with brokers down.
    """
    if drain is None:
        return results
    results["drain"] = drain
    down = drain.get("brokers_down")
    if drain.get("complete", True) and not down:
        return results
    why = (f"brokers down after the heal: {', '.join(f'{n} ({line})' for n, line in down.items())}" if down
           else "the drain did not read every key up to its highest known offset: unseen values may only be unread")
    bad = set(results.get("bad_error_types") or [])
    if (results.get("valid") is False and bad <= {"unseen"}) or (down and results.get("valid") is True):
        results["valid"] = "unknown"
        results["error"] = why
    return results


@contextlib.contextmanager
def _logged(what: str) -> Iterator[None]:
    """Run a cleanup step; a failure is logged and never stops the rest (or the analysis)."""
    try:
        yield
    except Exception:  # noqa: BLE001
        log.error("%s failed:\n%s", what, traceback.format_exc())


# -- the command line's view of a run ----------------------------------------------------


class _Rate:
    """Ops/s over the last few seconds (the display's, not the history's)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []

    def __call__(self, now: float, done: int) -> float:
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > 3.0:
            self.samples.pop(0)
        (t0, n0) = self.samples[0]
        return (done - n0) / (now - t0) if now > t0 else 0.0


def _live_view(stats: Stats, run_dir: list[Path], rate: _Rate) -> Any:
    from rich.table import Table

    now = time.monotonic()
    elapsed = now - stats.started
    done = stats.ok + stats.info + stats.fail
    t = Table.grid(padding=(0, 2))
    t.add_row("phase", f"[bold]{stats.phase}[/]", "elapsed", f"{elapsed:6.1f} s")
    t.add_row("ops/s", f"{rate(now, done):7.1f}",
              "ok/info/fail", f"[green]{stats.ok}[/]/[yellow]{stats.info}[/]/[red]{stats.fail}[/]")
    faults = ", ".join(f"{k} ({v})" for k, v in stats.faults.items()) or "none"
    t.add_row("faults", faults, "run", str(run_dir[0]) if run_dir else "")
    return t


def verdict_table(results: dict[str, Any]) -> Any:
    """The anomaly table printed at the end of a run."""
    from rich.table import Table

    valid = results.get("valid")
    colour = "green" if valid is True else "red" if valid is False else "yellow"
    t = Table(title=f"valid: [bold {colour}]{str(valid).lower()}[/]", title_justify="left")
    t.add_column("anomaly")
    t.add_column("count", justify="right")
    t.add_column("bad")
    bad = set(results.get("bad_error_types") or [])
    for kind, entry in sorted((results.get("anomalies") or {}).items()):
        count = entry.get("count", "") if isinstance(entry, dict) else ""
        t.add_row(kind, str(count), "[red]yes[/]" if kind in bad else "no")
    if not t.rows:
        t.add_row("[dim]none[/]", "0", "")
    if results.get("error"):
        t.caption = str(results["error"])
    return t


def _print_profile(cfg: TestConfig, console: Any) -> None:
    """The guarantee under test and the client configs it gives, before anything starts."""
    if cfg.workload == "offsets":
        from logquake.workloads.offsets import offset_keys

        keys = offset_keys(cfg)
        console.print(f"[bold]offsets[/]: {keys.groups} groups x {keys.partitions} partitions of {keys.topic}, "
                      "standalone commits, checked as registers for linearizability")
        return
    prof = describe(apply_profile(cfg))
    console.print(f"[bold]guarantee[/] {prof['guarantee']} (offsets committed {prof['offset_commit']};"
                  f" allowed: {', '.join(prof['allowed_anomalies'])})")
    for side in ("producer_config", "consumer_config"):
        conf = prof[side]
        console.print(f"  {side.split('_')[0]}: " + ", ".join(f"{k}={conf[k]}" for k in sorted(conf)))


def run_with_display(cfg: TestConfig, console: Any) -> int:
    """Run a test under a live rich display; print the verdict and the run path; the exit code."""
    from rich.live import Live

    stats = Stats()
    run_dir: list[Path] = []
    outcome: RunOutcome | None = None
    _print_profile(cfg, console)
    try:
        rate = _Rate()
        with Live(get_renderable=lambda: _live_view(stats, run_dir, rate), console=console,
                  refresh_per_second=4, transient=False):
            outcome = run_test(cfg, stats=stats, on_run_dir=run_dir.append)
    except KeyboardInterrupt:
        console.print("[red]aborted[/]: in-flight ops were abandoned; history.jsonl is on disk")
        if run_dir:
            console.print(f"run: {run_dir[0]}")
        return 130
    except LogquakeError as e:
        if run_dir:
            e.hint = ((e.hint + "; ") if e.hint else "") + f"see {run_dir[0] / store.HARNESS_LOG}"
        raise
    assert outcome is not None
    console.print()
    console.print(verdict_table(outcome.results))
    if "linear" in outcome.results:  # the linearizability checker's explanation, in words
        from logquake.checker.linear import summary_lines

        console.print("\n".join(summary_lines(outcome.results)), highlight=False, markup=False)
    if outcome.interrupted:
        console.print("[yellow]interrupted[/]: analysed what was recorded")
    console.print(f"run: {outcome.run_dir}")
    return outcome.exit_code

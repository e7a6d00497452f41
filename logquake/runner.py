"""One test, start to finish. This module alone knows the phases; in order:

1. resolve   the config gets a concrete seed (TestConfig.with_seed)
2. store     results/<name>/<start>/ with test.json, harness.log, history.jsonl (opened)
3. cluster   open_cluster(cfg, run_dir) and wait until the brokers answer
4. main      `concurrency` workers (threads, one client each, rate-limited over all; the
             Crew of logquake.crew) follow the workload's generator for `time_limit` s while
             the NemesisScheduler flips faults (ops begun before the limit run to their end,
             as under Jepsen's time limit); a workload that drives itself (the pipeline)
             runs its load through phases 4-7 instead
5. heal      the scheduler stops and heals everything (also in `finally`)
6. recovery  wait `recovery_time` s for leaders to settle, then until the cluster serves every
             node's clients again (Cluster.wait_ready, at most SERVING_AFTER_HEAL_S): a broker
             restarted just before the heal may still be replaying its logs
7. drain     every worker assigns all keys from the beginning and polls up to the highest
             known offset of every key, then, where the system's client can point a read at
             a node (System.node_reads) and its servers can serve that, one more reader per
             node does the same there (else skipped, saying why); at most `drain_time` s
8. teardown  clients closed, node logs collected, nemesis torn down, cluster closed (`finally`)
9. history   closed and fsynced: on disk before any analysis
10. analyse  the workload's checker -> results.json, junit.xml, report.html
11. latest   results/latest points at this run

Ctrl-C (SIGINT) ends the main phase early and skips recovery and drain; heal, teardown and
analysis of what was recorded still run, and with_interruption makes a verdict that rests on
the unread part unknown. A second Ctrl-C aborts the in-flight ops' wait.
Which workload runs is its record in logquake.workloads.registry; stack dumps of a phase past
its bound are logquake.diagnostics'; the command line's live view is logquake.display's.
"""

from __future__ import annotations

import contextlib
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
from typing import TYPE_CHECKING, Any, cast

from logquake.config import TestConfig, save_config
from logquake.crew import CALL_TIMEOUT, CLOSE_TIMEOUT, Crew, Pacer, Recorder, Stats, Worker
from logquake.diagnostics import StackDumps
from logquake.errors import HistoryFormatError, HostError, LogquakeError
from logquake.guarantees import apply_guarantee
from logquake.history import HistoryWriter, Op, load_history
from logquake.results import store
from logquake.systems import Kill, NodeLifecycle, NodeNeeds
from logquake.workloads import DRAIN, MAIN, FinalReads, Workload, get_workload
from logquake.workloads.client import Client
from logquake.workloads.registry import describe

if TYPE_CHECKING:
    from logquake.cluster import Cluster, Host

log = logging.getLogger("logquake.runner")

# Past a phase's own bound by this much, every thread's stack is dumped to harness.log.
BOUND_SLACK = 15.0
# After the recovery time, the longest wait for the cluster to serve again before the drain.
SERVING_AFTER_HEAL_S = 60.0
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
    from logquake.cluster.backends import system_for
    from logquake.nemesis import node_needs

    with contextlib.closing(_open(cfg, run_dir, system=system_for(cfg), needs=node_needs(cfg.nemesis))) as cluster:
        yield cluster


def check(ops: list[Op], cfg: TestConfig) -> dict[str, Any]:
    """The workload's checker's verdict; a crashing checker gives `unknown`, with the reason.

    The guarantee (logquake.guarantees) set the client configs in run_test; the same record
    decides here which anomaly types are bad.
    """
    try:
        return get_workload(cfg.workload).check(ops, cfg)
    except HistoryFormatError:
        raise  # a history checked from its file (`check --max-memory`): bad input, named by line
    except Exception as e:  # noqa: BLE001 - an analysis that raises is unknown, error attached
        log.error("checker raised:\n%s", traceback.format_exc())
        return {"valid": "unknown", "error": f"checker raised {type(e).__name__}: {e}", "anomalies": {}}


def write_report(run_dir: Path) -> Path | None:
    """report.html through logquake.results.write_report (the report's owner); None if it failed."""
    from logquake.results import write_report as _write

    try:
        return _write(run_dir)
    except Exception:  # noqa: BLE001 - a broken report never hides the verdict
        log.error("report failed:\n%s", traceback.format_exc())
        return None


# -- the run ----------------------------------------------------------------------------


class _Interrupt:
    """The first SIGINT or SIGTERM sets `stop` (graceful); a second one raises KeyboardInterrupt.

    SIGTERM is what a CI job's timeout, `timeout` and `kill` send: taken as a Ctrl-C, it ends
    the run the same way (heal, teardown, analysis) instead of killing the harness and leaving
    its brokers, a node's paused ones among them, running outside a lab it never took down."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.hits = 0
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.hits += 1
        if self.hits > 1:
            raise KeyboardInterrupt
        log.warning("interrupted (%s): stopping the run gracefully (heal, teardown, analysis)",
                    signal.Signals(signum).name)
        self.stop.set()

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def run_test(
    cfg: TestConfig,
    *,
    stats: Stats | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
    stop: threading.Event | None = None,
    make: Callable[[TestConfig], Client] | None = None,
    cluster: Callable[[TestConfig, Path], contextlib.AbstractContextManager[Any]] | None = None,
) -> RunOutcome:
    """Run one whole test (the phases of the module docstring) and store its results.

    Raises LogquakeError (after cleaning up) when the test could not run at all, e.g. the
    cluster did not come up. `stats` is updated live for a display; `stop` ends the run early
    as Ctrl-C does; `make` builds a fresh client (the workload's, of the configured library, by
    default);
    `cluster` opens the cluster (open_cluster by default).
    """
    cfg = apply_guarantee(cfg.with_seed())
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
        from logquake.cluster.backends import system_for

        server = system_for(cfg).describe(cfg)
        save_config(cfg, run_dir / store.TEST, run_dir=str(run_dir), start_time=time.time(), profile=profile,
                    **({"server": server} if server else {}))
        writer = HistoryWriter(run_dir / store.HISTORY)
        recorder = Recorder(writer, stats)
        with _Interrupt(stop) as intr:
            try:
                drain = _run_phases(cfg, run_dir, recorder, stats, stop, make, cluster or open_cluster, dumps)
            finally:
                recorder.close()  # phase 9: the history is on disk before analysis
            interrupted = intr.hits > 0
        stats.enter("analyse")
        results = with_interruption(with_drain(check(load_history(run_dir / store.HISTORY), cfg), drain),
                                    interrupted=interrupted)
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




def _run_phases(
    cfg: TestConfig, run_dir: Path, recorder: Recorder, stats: Stats, stop: threading.Event,
    make: Callable[[TestConfig], Client] | None,
    opener: Callable[[TestConfig, Path], contextlib.AbstractContextManager[Any]],
    dumps: StackDumps,
) -> dict[str, Any] | None:
    """Phases 3-8; every exit path heals and tears down. What the drain reached (None if none ran)."""
    assert cfg.seed is not None
    workload = get_workload(cfg.workload)
    stats.enter("cluster")
    with opener(cfg, run_dir) as cluster:
        crew: Crew | None = None
        nemesis = scheduler = None
        try:
            cluster.wait_ready(120.0)
            if workload.make_generator is not None:
                mk = make or workload.make_client
                assert mk is not None
                crew = Crew(cfg, workload.make_generator(cfg), recorder, cluster.bootstrap_servers, lambda: mk(cfg),
                            call_timeout=CALL_TIMEOUT)
            if cfg.nemesis:
                from logquake.nemesis import NemesisScheduler, build_nemesis

                nemesis = build_nemesis(cfg, cluster)
                nemesis.setup()
                scheduler = NemesisScheduler(
                    nemesis, interval=cfg.nemesis_interval, rng=random.Random(f"schedule-{cfg.seed}"),
                    record=recorder.record, until=cfg.time_limit,
                )
            if crew is None:
                _self_driven(cfg, workload, cluster.bootstrap_servers, recorder, scheduler, stats, stop)
                scheduler = None  # healed inside
                return None
            with dumps.bound("main phase", cfg.time_limit + CALL_TIMEOUT + BOUND_SLACK):
                _main_phase(cfg, crew, scheduler, stats, stop)
            _heal(scheduler, stats)
            scheduler = None
            if not stop.is_set():
                stats.enter("recovery")
                stop.wait(cfg.recovery_time)
                _wait_serving(cluster, stop)
            if stop.is_set():
                return None
            down = _brokers_down(cluster)
            final = cast(FinalReads, crew.gen) if workload.final_read else None
            with dumps.bound("drain", cfg.drain_time + CALL_TIMEOUT + BOUND_SLACK):
                drain = _drain_phase(cfg, crew, final, stats, stop)
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


def _self_driven(cfg: TestConfig, workload: Workload, bootstrap: str, recorder: Recorder, scheduler: Any,
                 stats: Stats, stop: threading.Event) -> None:
    """A workload that drives itself (the pipeline): its load under faults, heal, recovery, drain."""
    assert workload.drive is not None

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

    workload.drive(cfg, bootstrap, recorder.record, during)


def _heal(scheduler: Any, stats: Stats) -> None:
    if scheduler is None:
        return
    stats.enter("heal")
    with _logged("final heal"):
        scheduler.stop_and_heal()


def _drain_phase(cfg: TestConfig, crew: Crew, final: FinalReads | None, stats: Stats,
                 stop: threading.Event) -> dict[str, Any] | None:
    """Phase 7, at most drain_time s plus one call's timeout; which workers read everything
    (None where the workload has no final read: `final`, its generator, is None then)."""
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
    if final is None:
        return None
    with crew.gen_lock:
        short = {w.index: final.short_keys(w.index) for w in crew.workers if not final.drained(w.index)}
    if short:
        keys = sorted(set.intersection(*(set(ks) for ks in short.values()))) if len(short) == len(crew.workers) else []
        log.warning("drain: workers %s did not read every key to the end of its log within %.0f s%s",
                    sorted(short), cfg.drain_time, f" (no worker read key(s) {_listed(keys)})" if keys else "")
    # Each worker makes a final read of every key from the beginning to the end the system
    # reported (ops marked final): one that got through read everything.
    out: dict[str, Any] = {"complete": len(short) < len(crew.workers), "workers_short": sorted(short)}
    if stop.is_set():
        return out
    if (why := _node_reads_unavailable(cfg)) is not None:
        log.warning("drain: no final read from each node: %s", why)
        out["node_reads_skipped"] = why
    elif (nodes := _read_every_node(cfg, crew, final, stop, deadline)) is not None:
        out["node_reads"] = nodes
    return out


def _node_reads_unavailable(cfg: TestConfig) -> str | None:
    """Why this test's servers cannot serve the reads from each node its system's client
    could point (a server too old: System.unavailable); None when they can or there are none.
    Skipped, they change no verdict: the per-node figures are extra evidence."""
    from logquake.cluster.backends import system_for
    from logquake.systems import NODE_READS

    system = system_for(cfg)
    return system.unavailable(cfg, NODE_READS) if system.node_reads is not None else None


def _listed(keys: list[int], cap: int = 16) -> str:
    return ", ".join(map(str, keys[:cap])) + (" ..." if len(keys) > cap else "")


def _read_every_node(cfg: TestConfig, crew: Crew, final: FinalReads, stop: threading.Event,
                     deadline: float) -> dict[str, bool] | None:
    """The drain's final read once more from each node alone, until `deadline`: node -> did
    its reader reach every key's end there. None where the system's client cannot point a
    read at a node (its record's `node_reads` is None).

    Each node gets one worker of its own crew (its bootstrap reaches that node alone), with
    processes above every process of the run so far, distinct from each other's successors.
    """
    from logquake.cluster.backends import system_for

    node_reads = system_for(cfg).node_reads
    nodes = node_reads(crew.bootstrap) if node_reads is not None else {}
    if not nodes:
        return None
    first = max(w.process for w in crew.workers) + 1
    readers: list[tuple[str, Crew, Worker]] = []
    each = replace(cfg, concurrency=len(nodes))  # a successor's process steps by the number of readers
    for i, (node, bootstrap) in enumerate(sorted(nodes.items())):
        reader = Crew(each, crew.gen, crew.recorder, bootstrap, crew.make, call_timeout=crew.watchdog.timeout)
        reader.gen_lock = crew.gen_lock  # one generator, one lock
        w = Worker(cfg.concurrency + i, first + i, reader)
        reader.workers = [w]
        with crew.gen_lock:
            final.read_from(w.index, node)
        readers.append((node, reader, w))
    over = threading.Event()
    try:
        for _, reader, _ in readers:
            reader.start(DRAIN, over, None)
        while any(r.alive() for _, r, _ in readers) and not stop.is_set() and time.monotonic() < deadline:
            stop.wait(0.2)
        over.set()
        for _, reader, _ in readers:
            reader.join(max(1.0, deadline + CALL_TIMEOUT - time.monotonic()))
    finally:
        over.set()
        for _, reader, _ in readers:
            reader.close(CLOSE_TIMEOUT / 2)
    with crew.gen_lock:
        done = {node: final.drained(reader.workers[0].index) for node, reader, _ in readers}
    if short := sorted(n for n, ok in done.items() if not ok):
        log.warning("drain: the final read from node(s) %s did not reach every key's end there", ", ".join(short))
    return done


def _wait_serving(cluster: Cluster, stop: threading.Event) -> None:
    """Until the cluster is ready again (Ctrl-C ends the wait); past SERVING_AFTER_HEAL_S the
    drain goes on and says what it could not read."""
    deadline = time.monotonic() + SERVING_AFTER_HEAL_S
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            cluster.wait_ready(min(1.0, max(0.0, deadline - time.monotonic())))
        except HostError as e:
            if time.monotonic() < deadline:
                continue
            log.warning("recovery: not serving again %.0f s after the heal (%s); draining anyway",
                        SERVING_AFTER_HEAL_S, e)
            return
        if time.monotonic() - t0 > 1.0:
            log.info("recovery: the cluster served again %.1f s after the recovery time", time.monotonic() - t0)
        return


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


#: Anomaly types that rest on the history being complete: a value nobody read, an input
#: never seen in the output, and lost-write, a value below the highest one read that no ok op
#: read. A run whose drain read nothing to the end cannot tell these from values it did not
#: get to read: a poll in an op that then failed (an aborted transaction) moves its consumer,
#: or its group's committed offset, past values no ok op will read; only the drain's final
#: read from the beginning reads them (a SIGTERMed soak with subscribe: 28 such "lost"
#: values, every one read by a failed txn).
NEEDS_COMPLETE_RUN = frozenset({"unseen", "lost-write", "lost-processing"})


def with_drain(results: dict[str, Any], drain: dict[str, Any] | None) -> dict[str, Any]:
    """The verdict, knowing what the drain read and whether every broker was up for it.

    Values nobody read are `unseen`; when no drain worker got through, or brokers had died
    (a drain against a dead cluster reads nothing), that proves nothing: a verdict resting on
    NEEDS_COMPLETE_RUN alone is unknown, and so is a valid one with brokers down.
    """
    if drain is None:
        return results
    results["drain"] = drain
    down = drain.get("brokers_down")
    if drain.get("complete", True) and not down:
        return results
    why = (f"brokers down after the heal: {', '.join(f'{n} ({line})' for n, line in down.items())}" if down
           else "the drain did not read every key to the end of its log: unseen and lost values may only be unread")
    bad = set(results.get("bad_error_types") or [])
    if (results.get("valid") is False and bad <= NEEDS_COMPLETE_RUN) or (down and results.get("valid") is True):
        results["valid"] = "unknown"
        results["error"] = why
    return results


def with_interruption(results: dict[str, Any], *, interrupted: bool) -> dict[str, Any]:
    """The verdict of a run cut short by Ctrl-C, applied after with_drain.

    An interrupted run whose drain did not read everything proves only what its recorded
    part shows: a bad anomaly that needs no complete history (G1a, duplicate, ...) is still
    proof, so such a verdict stays invalid; anything else (valid, or bad only by unseen or
    lost values) is unknown, with the reason and the anomalies the recorded part does prove
    (`proven`).
    """
    if not interrupted:
        return results
    results["interrupted"] = True
    drain = results.get("drain")
    if isinstance(drain, dict) and drain.get("complete") and not drain.get("brokers_down"):
        return results
    proven = sorted(set(results.get("bad_error_types") or []) - NEEDS_COMPLETE_RUN)
    results["proven"] = proven
    if results.get("valid") is False and proven:
        return results
    if results.get("valid") in (True, False):
        results["valid"] = "unknown"
        results["error"] = ("interrupted before the drain read everything: values not read yet may only be "
                            "unread, so unseen and lost values prove nothing; "
                            + (f"the recorded part proves {', '.join(proven)}" if proven
                               else "the recorded part proves no anomaly"))
    return results


@contextlib.contextmanager
def _logged(what: str) -> Iterator[None]:
    """Run a cleanup step; a failure is logged and never stops the rest (or the analysis)."""
    try:
        yield
    except Exception:  # noqa: BLE001
        log.error("%s failed:\n%s", what, traceback.format_exc())

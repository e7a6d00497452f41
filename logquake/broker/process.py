"""`logquake broker`: one broker process, logging to its file and stderr, stopping on SIGTERM.

The broker runs on glibc's malloc, not pymalloc (`_use_system_malloc`); PYTHONMALLOC set to
anything (e.g. `pymalloc`) keeps the interpreter's choice.

Always on: every 30 s the node's stats line in broker.log carries memory gauges (node.py's
`_memory_stats`: RSS, glibc's heap in use, free and mmapped, the Raft groups held and their
windows' bytes; traced bytes when tracemalloc runs), so a soak shows where RSS goes.

Opt-in diagnostics, set in the environment of whatever starts the brokers (`logquake run` passes its
environment on):
- LQ_BROKER_CPROFILE=<dir>: a CPU profile of the event loop, written to <dir> when the broker stops.
- LQ_BROKER_TRACEMALLOC=<dir>: tracemalloc runs (4 frames deep) and every LQ_BROKER_TRACEMALLOC_EVERY
  seconds (default 60) the broker writes n<id>-<pid>-<seq>.snap (a `tracemalloc.Snapshot.dump`, for
  `Snapshot.load(...).compare_to(...)`) and n<id>-<pid>-<seq>.txt (the top allocation sites by size,
  with the traced total, its peak and RSS) to <dir>. For finding what makes RSS grow; it slows the
  broker down (a snapshot of a loaded broker takes seconds) and adds memory of its own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import sys
import types
from pathlib import Path

from logquake.broker.nodeconfig import NodeConfig, load_node_config

__all__ = ["run_broker"]

log = logging.getLogger("logquake.broker")


def _setup_logging(cfg: NodeConfig) -> None:
    cfg.log_file.parent.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s n{cfg.node_id} %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger("logquake")
    root.setLevel(logging.INFO)
    for h in (logging.FileHandler(cfg.log_file), logging.StreamHandler(sys.stderr)):
        h.setFormatter(fmt)
        root.addHandler(h)


def _light_kafka_import() -> None:
    """Let `kafka.protocol`/`kafka.record` load without kafka-python's client package.

    `import kafka` runs kafka/__init__.py, which imports the whole client (admin, consumer,
    producer, network): about a second of start-up the broker never uses. A bare package
    module with the same search path makes the submodules importable on their own."""
    if "kafka" in sys.modules:
        return
    spec = importlib.util.find_spec("kafka")
    if spec is None or not spec.submodule_search_locations:
        return
    mod = types.ModuleType("kafka")
    mod.__path__ = list(spec.submodule_search_locations)
    mod.__file__ = spec.origin
    mod.__spec__ = spec
    sys.modules["kafka"] = mod


async def _serve(cfg: NodeConfig) -> None:
    _light_kafka_import()
    from logquake.broker.node import Node

    node = Node(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stopper(node, sig))
    await node.run()


def _stopper(node, sig):  # type: ignore[no-untyped-def]
    def stop() -> None:
        log.info("received %s; stopping", signal.Signals(sig).name)
        node.stop()

    return stop


def run_broker(node_id: int, config: Path) -> int:
    """Load the config (ConfigError on a bad one), then serve until SIGTERM; returns the exit code."""
    _use_system_malloc(node_id, config)
    cfg = load_node_config(config, node_id=node_id)
    _setup_logging(cfg)
    try:
        import uvloop  # type: ignore[import-not-found]

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    prof = _cpu_profiler()
    _start_tracemalloc(node_id)
    try:
        runner(_serve(cfg))
    except OSError as e:
        log.error("cannot serve: %s", e)
        return 1
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(Path(os.environ["LQ_BROKER_CPROFILE"]) / f"n{node_id}-{os.getpid()}.prof")
    return 0


def _use_system_malloc(node_id: int, config: Path) -> None:
    """Re-exec this broker (same pid) with PYTHONMALLOC=malloc unless PYTHONMALLOC is set.

    Entry payloads are mostly under 512 bytes, so pymalloc puts them in 1 MiB arenas beside
    long-lived small objects (batch indexes, producer states); an arena is returned to the OS
    only when all of it is free. A restart loads every group's payload window and replays its
    log, then idle groups let the payloads go, yet the arenas stay: measured on a copy of a
    soak broker's data (68 groups, 20 MB), RSS 34 MB before, 72 MB after release with 15.7 MB
    of 43 MB in arenas in use; 52 MB with glibc's malloc, whose free pages heap.py trims."""
    if os.environ.get("PYTHONMALLOC"):
        return
    os.environ["PYTHONMALLOC"] = "malloc"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "logquake.broker", "--node-id", str(node_id),
                              "--config", str(config)])


def _cpu_profiler():  # type: ignore[no-untyped-def]
    """With LQ_BROKER_CPROFILE=<dir> set: a cProfile of the event loop's thread, timed by that
    thread's CPU time (not wall time), written to <dir> when the broker stops. For benchmarks;
    it slows the broker down about twofold."""
    if not os.environ.get("LQ_BROKER_CPROFILE"):
        return None
    import cProfile
    import time

    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    return prof


def _start_tracemalloc(node_id: int) -> None:
    """With LQ_BROKER_TRACEMALLOC=<dir> set: start tracemalloc and a daemon thread that writes
    snapshots to <dir> (a thread, so a blocked event loop still gets snapshotted)."""
    out = os.environ.get("LQ_BROKER_TRACEMALLOC")
    if not out:
        return
    import threading
    import tracemalloc

    every = float(os.environ.get("LQ_BROKER_TRACEMALLOC_EVERY", "60"))
    Path(out).mkdir(parents=True, exist_ok=True)
    tracemalloc.start(4)
    stem = Path(out) / f"n{node_id}-{os.getpid()}"
    threading.Thread(target=_snapshot_loop, args=(stem, every), daemon=True, name="tracemalloc").start()


def _rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def _snapshot_loop(stem: Path, every: float) -> None:
    import time
    import tracemalloc

    seq = 0
    while True:
        time.sleep(every)
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        snap.dump(f"{stem}-{seq:03d}.snap")
        top = snap.statistics("lineno")
        total = sum(s.size for s in top)
        peak = tracemalloc.get_traced_memory()[1]
        lines = [f"# traced {total / 1e6:.2f} MB in {sum(s.count for s in top)} blocks, peak {peak / 1e6:.2f} MB;"
                 f" rss {_rss_mb():.1f} MB"]
        lines += [str(s) for s in top[:40]]
        Path(f"{stem}-{seq:03d}.txt").write_text("\n".join(lines) + "\n")
        seq += 1

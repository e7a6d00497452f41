"""`logquake broker`: one broker process, logging to its file and stderr, stopping on SIGTERM."""

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
    cfg = load_node_config(config, node_id=node_id)
    _setup_logging(cfg)
    try:
        import uvloop  # type: ignore[import-not-found]

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    prof = _cpu_profiler()
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

"""`logquake broker`: one broker process, logging to its file and stderr, stopping on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
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


async def _serve(cfg: NodeConfig) -> None:
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
    try:
        runner(_serve(cfg))
    except OSError as e:
        log.error("cannot serve: %s", e)
        return 1
    return 0

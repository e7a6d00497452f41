"""Fixtures and helpers for broker tests: a shared 3-node LocalCluster of real `logquake broker`
processes, and a one-node in-process `Node` whose one partition leads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from logquake.broker import LocalCluster
from logquake.broker.localcluster import free_ports
from logquake.broker.node import Node
from logquake.broker.nodeconfig import NodeAddress, NodeConfig
from logquake.broker.replica import PartitionReplica


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-node cluster on loopback, shared by the tests of one module."""
    c = LocalCluster(n=3, base_dir=tmp_path_factory.mktemp("cluster"))
    with c:
        c.wait_ready(timeout=60)
        yield c


def one_node_config(base: Path) -> NodeConfig:
    """A one-node broker's config, its data and log under `base`, on free loopback ports."""
    kafka, raft = free_ports(2)
    return NodeConfig(node_id=1, data_dir=base / "data", log_file=base / "log", fsync="never", tick_ms=20,
                      nodes=(NodeAddress(node_id=1, host="127.0.0.1", kafka_port=kafka, raft_port=raft),))


async def until(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll `cond` until it is true; after `timeout` s fail naming `what` was awaited."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def leading_partition(cfg: NodeConfig, *, new_topic: str | None = None
                            ) -> AsyncIterator[tuple[Node, PartitionReplica]]:
    """Run a one-node `Node` over `cfg` (first creating `new_topic`, of one partition, if given)
    and yield it with its one partition once that partition is a ready leader; stop it on exit."""
    node = Node(cfg)
    run = asyncio.create_task(node.run())
    try:
        if new_topic is not None:
            err, _ = await node.create_topic(new_topic, 1, 1)
            assert err == 0
        await until(lambda: node.partitions and next(iter(node.partitions.values())).is_ready_leader, "a leader")
        yield node, next(iter(node.partitions.values()))
    finally:
        node.stop()
        await run

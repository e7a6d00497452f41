"""Brokers on real sockets hold a bounded window of their log, whatever was written.

Three `Node`s run in this process (each with its own Kafka and peer sockets, data directory
and asyncio tasks, in one loop on a thread), so the test can measure the structures that held
every payload before (the Raft log, the partition's batches) rather than a process's RSS.
Clients are real confluent-kafka producers and consumers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from logquake.broker.localcluster import free_ports
from logquake.broker.node import IDLE_RELEASE_S, Node, window_shares
from logquake.broker.nodeconfig import NodeAddress, NodeConfig

WINDOW = 1 << 20
RECORD = 1024
MB_WRITTEN = 24
# The window, a quarter over it before a trim, and one entry (a produce request of up to 1 MB).
BOUND = WINDOW + WINDOW // 4 + (1 << 20) + 64 * 1024


class Cluster:
    """N Nodes in one event loop on a background thread; start, stop and inspect them."""

    def __init__(self, base: Path, n: int = 3, **cfg: Any) -> None:
        ports = free_ports(2 * n)
        addrs = tuple(NodeAddress(node_id=i + 1, host="127.0.0.1", kafka_port=ports[2 * i], raft_port=ports[2 * i + 1])
                      for i in range(n))
        self.cfgs = {a.node_id: NodeConfig(node_id=a.node_id, data_dir=base / f"n{a.node_id}", log_file=base / "log",
                                           nodes=addrs, fsync="never", log_window_bytes=WINDOW, tick_ms=20, **cfg)
                     for a in addrs}
        self.bootstrap = ",".join(f"127.0.0.1:{a.kafka_port}" for a in addrs)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nodes: dict[int, Node] = {}
        self.runs: dict[int, Any] = {}

    def call(self, fn: Callable[[], Any]) -> Any:
        """`fn()` run in the loop's thread (a consistent view of the nodes)."""
        async def run() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def start(self, i: int) -> None:
        node = self.call(lambda: Node(self.cfgs[i]))
        self.nodes[i] = node
        self.runs[i] = asyncio.run_coroutine_threadsafe(node.run(), self.loop)

    def stop(self, i: int) -> None:
        node = self.nodes.pop(i)
        self.loop.call_soon_threadsafe(node.stop)
        self.runs.pop(i).result(60)

    def close(self) -> None:
        for i in list(self.nodes):
            self.stop(i)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def create_topic(self, name: str, replicas: int = 3) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            node = next(iter(self.nodes.values()))
            fut = asyncio.run_coroutine_threadsafe(node.create_topic(name, 1, replicas, timeout=5), self.loop)
            if fut.result(30)[0] == 0:
                return
        raise AssertionError(f"topic {name} not created")

    def replicas(self) -> dict[int, Any]:
        """Node id -> its replica of the one partition (the lowest group id that is not metadata)."""
        return {i: min(n.partitions.values(), key=lambda r: r.info.group_id) for i, n in self.nodes.items()
                if n.partitions}

    def wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.call(cond):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def held(self, n: int) -> dict[int, tuple[int, int]]:
        """Per node, once all `n` records are applied and persisted everywhere (at rest): the
        payload bytes in memory of (the Raft log, the partition). Before that a follower
        also holds what it received and has not written yet."""
        def settled() -> bool:
            reps = self.replicas().values()
            return len(reps) == len(self.nodes) and all(
                r.state.next_offset == n and r.raft.stable_index == r.raft.last_index == r.raft.applied_index
                for r in reps)
        self.wait(settled, 60, f"{n} records applied and persisted on every node")
        return self.call(lambda: {i: (r.raft.memory_bytes, r.state.payload_bytes) for i, r in self.replicas().items()})


def produce(bootstrap: str, topic: str | list[str], n: int) -> None:
    """Records 0..n-1 to partition 0 of `topic` (of each of a list of topics, in turn)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[Any] = []
    for k in range(n * (len(topic) if isinstance(topic, list) else 1)):
        value = b"%09d" % k + b"v" * (RECORD - 9)
        if isinstance(topic, list):
            value = b"%09d" % (k // len(topic)) + value[9:]
        while True:
            try:
                p.produce(topic[k % len(topic)] if isinstance(topic, list) else topic, value=value, partition=0,
                          on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]


def consume_all(bootstrap: str, topic: str, n: int) -> list[int]:
    """The record numbers read from offset 0, checking each record sits at its own offset."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    k = int(m.value()[:9])
                    assert k == m.offset() and len(m.value()) == RECORD
                    got.append(k)
    finally:
        c.close()
    return got


def test_memory_stays_within_the_window_and_old_offsets_read_back(tmp_path: Path) -> None:
    n = MB_WRITTEN * (1 << 20) // RECORD
    c = Cluster(tmp_path)
    try:
        for i in (1, 2):  # node 3 is down for the whole write: it catches up from far behind
            c.start(i)
        c.create_topic("w")
        produce(c.bootstrap, "w", n)
        for i, (raft_bytes, partition_bytes) in c.held(n).items():
            assert raft_bytes <= BOUND and partition_bytes <= BOUND, (i, raft_bytes, partition_bytes, MB_WRITTEN)
        # A restart loads only the window; the restarted leader serves offset 0 from disk and
        # sends the empty node 3 a log that now lies wholly below its window.
        for i in (1, 2):
            c.stop(i)
            c.start(i)
        held = c.held(n)
        assert all(raft_bytes <= BOUND for raft_bytes, _ in held.values()), held
        c.start(3)  # catches up, and all three settle
        for i, (raft_bytes, partition_bytes) in c.held(n).items():
            assert raft_bytes <= BOUND and partition_bytes <= BOUND, (i, raft_bytes, partition_bytes)
        assert consume_all(c.bootstrap, "w", n) == list(range(n))
        # At rest (no writes for IDLE_RELEASE_S) a node holds no payloads at all, however much
        # was written, and reads still come back whole from disk.
        c.wait(lambda: all(r.raft.memory_bytes == r.state.payload_bytes == 0 for r in c.replicas().values()),
               IDLE_RELEASE_S + 5, "idle replicas to release their windows")
        assert consume_all(c.bootstrap, "w", n) == list(range(n))
        c.stop(c.call(lambda: next(i for i, r in c.replicas().items() if r.is_ready_leader)))
        # Whichever node leads now, node 3 among the candidates, serves the same log.
        assert consume_all(c.bootstrap, "w", n) == list(range(n))
    finally:
        c.close()


def test_busy_groups_together_hold_at_most_the_node_budget(tmp_path: Path) -> None:
    """Four partitions written one after the other, none idle long enough to let its window
    go: together they keep about `node_window_bytes`, not a window each (never idle, the
    internal partitions each filled theirs through an hour's soak)."""
    budget = WINDOW // 2
    c = Cluster(tmp_path, n=1, node_window_bytes=budget)
    try:
        c.start(1)
        topics = [f"b{k}" for k in range(4)]
        for t in topics:
            c.create_topic(t, replicas=1)
        produce(c.bootstrap, topics, WINDOW // RECORD)  # a window each, written side by side
        node = c.nodes[1]

        def held() -> int:
            return sum(r.raft.memory_bytes for r in node.partitions.values())
        # Well before IDLE_RELEASE_S, the budget (checked every second) has cut them.
        c.wait(lambda: held() <= budget + (budget >> 2) + 64 * 1024, 3.0, "the windows to fit the node's budget")
        assert consume_all(c.bootstrap, topics[0], WINDOW // RECORD) == list(range(WINDOW // RECORD))
    finally:
        c.close()


@pytest.mark.parametrize(("held", "budget", "want"), [
    ([100, 200, 300], 600, [None, None, None]),  # all fit
    ([100, 500, 900], 900, [None, 400, 400]),  # the small one stays whole
    ([300, 300, 300], 600, [200, 200, 200]),
    ([0, 50, 10_000, 7_000], 1000, [None, None, 475, 475]),
    ([5, 5], 0, [0, 0]),
])
def test_window_shares_cut_the_biggest_to_an_even_share(held, budget, want) -> None:  # noqa: ANN001
    assert window_shares(held, budget) == want

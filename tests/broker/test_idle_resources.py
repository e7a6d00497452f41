"""What a broker keeps per partition it has held: file descriptors bounded, not one LOCK and
one open segment per Raft group (the hour-long soak saw a node's fds follow its topic count)."""

from __future__ import annotations

import os
from pathlib import Path

from logquake.broker import LocalCluster
from tests.broker.clients import confluent_consume, confluent_produce

GROUPS = 200
FD_BOUND = 90  # ~25 for sockets, logs and the interpreter, the node's open-segment cap (32), slack


def _fds_under(pid: int, root: Path) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(root)):
                n += 1
        except OSError:
            pass  # closed meanwhile
    return n


def test_a_node_that_held_200_partitions_has_bounded_fds_and_reopens_on_demand(tmp_path: Path) -> None:
    with LocalCluster(n=1, base_dir=tmp_path) as c:
        c.wait_ready(timeout=60)
        c.create_topic("many", partitions=GROUPS, replication_factor=1, timeout=120)
        pid = c.procs[1].pid
        total = len(os.listdir(f"/proc/{pid}/fd"))
        in_data = _fds_under(pid, c.node_dir(1) / "data")
        # main held 2 per group here (its LOCK and its last segment): 400+
        assert total < FD_BOUND and in_data <= 40, (total, in_data)
        # The first partitions' segments were closed long ago: writing reopens them, and the
        # records survive a crash and restart (fsync policy always, acks=all).
        for part in (0, GROUPS - 1):
            offsets, errors = confluent_produce(c.bootstrap_servers, "many", [b"a", b"b"], partition=part,
                                               extra={"enable.idempotence": True})
            assert not errors and offsets == [0, 1], (part, offsets, errors)
        c.kill(1)
        c.start(1)
        c.wait_ready(timeout=60)
        c.wait_leaders("many", timeout=120)
        for part in (0, GROUPS - 1):
            got = confluent_consume(c.bootstrap_servers, "many", 2, partition=part, timeout=60)
            assert [v for _, v in got] == [b"a", b"b"], (part, got)
        assert len(os.listdir(f"/proc/{c.procs[1].pid}/fd")) < FD_BOUND

"""build_nemesis + NemesisScheduler over every fault family on a real lab, then a final heal that leaves it whole."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from cluster.labkit import connect_matrix, fake_cluster, wait_until

from logquake.config import TestConfig
from logquake.history import Op
from logquake.nemesis import CHAIN, LOSS_CHAIN, NemesisScheduler, Net, build_nemesis

pytestmark = pytest.mark.lab

FAULTS = ("partition", "kill", "pause", "clock", "packet-loss", "disk", "pause-kill", "partition-kill")


@pytest.mark.slow
def test_schedule_of_every_fault_then_final_heal(tmp_path):
    cfg = TestConfig(nodes=3, replication_factor=3, nemesis=FAULTS, seed=11, nemesis_interval=0.1)
    with fake_cluster(3, tmp_path, faketime=True, lazyfs=True) as c:
        nemesis = build_nemesis(cfg, c)
        assert tuple(nemesis.faults) == FAULTS
        nemesis.setup()
        ops: list[Op] = []
        lock = threading.Lock()

        def record(op: Op) -> Op:
            with lock:
                ops.append(op)
            return op

        sched = NemesisScheduler(nemesis, interval=0.1, rng=random.Random(3), record=record)
        sched.start()
        wait_until(lambda: len({o.f for o in ops if o.f.startswith("start-")}) >= 4, timeout=120,
                   what="four different faults started")
        assert sched.stop_and_heal() is True, sched.errors
        nemesis.teardown()

        assert all(o.process == "nemesis" and o.type == "info" for o in ops)
        assert ops[-1].f == "heal"
        started = [o for o in ops if o.f.startswith("start-")]
        assert all(isinstance(o.value, str) and o.value for o in started if not o.get("error")), started
        # the cluster is whole again: every broker up and running, no chains, true clocks, all links open
        for n in c.nodes:
            pid = c.lifecycle.pid(n)
            assert c.lifecycle.is_up(n)
            raw = Path(f"/proc/{pid}/stat").read_text()
            assert raw[raw.rindex(")") + 2] != "T", f"{n} still paused"
            assert Path(c.lifecycle.spec(n).path("faketime.rc")).read_text().strip() == "+0.000"
        net = Net(c.hosts, c.addresses, iptables=c.iptables)
        for n in c.nodes:
            rules = net.rules(n)
            assert CHAIN not in rules and LOSS_CHAIN not in rules
        wait_until(lambda: connect_matrix(c.state, c.hosts, port=9092) == set(), what="all links open")

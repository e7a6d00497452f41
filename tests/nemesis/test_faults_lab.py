"""kill / pause / clock / disk faults on real processes in a real lab, through the broker lifecycle.

The 'brokers' here are tests/cluster/fake_broker.py: they listen on the kafka port, write their
wall clock and a counter to files, and append to a segment file with an fsync every 5th line.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from cluster.labkit import fake_clock, fake_cluster, fake_counter, wait_until

from logquake.cluster.shims import drop_unsynced, set_clock
from logquake.nemesis import ClockFault, DiskFault, KillFault, PauseFault
from logquake.systems import get_system
from logquake.systems.base import port_open

SEGMENTS = get_system("kafka").data_files

pytestmark = pytest.mark.lab


def _state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2]


def test_kill_and_restart(tmp_path):
    with fake_cluster(3, tmp_path) as c:
        lc = c.lifecycle
        old = {n: lc.pid(n) for n in c.nodes}
        fault = KillFault(c, random.Random(0))
        desc = fault.start("majority")
        killed = desc.removeprefix("killed ").split(",")
        assert len(killed) == 2
        for n in c.nodes:
            assert lc.is_up(n) == (n not in killed)
        for n in killed:
            assert not port_open(c.addresses[n], 9092)
        assert fault.stop() == f"started {','.join(killed)}"
        for n in killed:
            assert lc.pid(n) != old[n]
            wait_until(lambda n=n: port_open(c.addresses[n], 9092), what=f"{n} listening again")
        assert all(lc.is_up(n) for n in c.nodes)


def test_pause_really_stops_the_process_and_resume_continues(tmp_path):
    with fake_cluster(2, tmp_path) as c:
        fault = PauseFault(c, random.Random(0))
        assert fault.start("one").startswith("paused ")
        (node,) = fault.paused
        pid = c.lifecycle.pid(node)
        wait_until(lambda: _state(pid) == "T", what="stopped state")
        frozen = fake_counter(c, node)
        other = next(n for n in c.nodes if n != node)
        moving = fake_counter(c, other)
        # the unpaused node advances by 10+ steps while the paused one does not move at all
        wait_until(lambda: fake_counter(c, other) >= moving + 10, what="other node to advance")
        assert fake_counter(c, node) == frozen
        assert c.lifecycle.is_up(node)  # paused is still up
        fault.stop()
        wait_until(lambda: fake_counter(c, node) > frozen, what="resumed node to advance")


def test_clock_bump_is_seen_by_the_process_and_reset_restores(tmp_path):
    with fake_cluster(2, tmp_path, faketime=True) as c:
        def skew(n: str) -> float:
            return fake_clock(c, n) - time.time()

        for n in c.nodes:
            assert abs(skew(n)) < 5
        set_clock(c.hosts["n1"], c.lifecycle.spec("n1"), 3600)
        wait_until(lambda: abs(skew("n1") - 3600) < 5, what="n1 one hour ahead")
        assert abs(skew("n2")) < 5
        fault = ClockFault(c, random.Random(3))
        desc = fault.start("bump")
        assert desc.startswith("bumped ")
        fault.stop()
        for n in c.nodes:
            wait_until(lambda n=n: abs(skew(n)) < 5, what=f"{n} back to true time")


@pytest.mark.slow
def test_clock_strobe_flips_between_skewed_and_true_time(tmp_path):
    with fake_cluster(1, tmp_path, faketime=True) as c:
        fault = ClockFault(c, random.Random(0))
        desc = fault.strobe(["n1"], delta=5.0, period=0.3)
        assert desc == "strobing n1 by 5000 ms every 300 ms"
        seen = set()

        def both() -> bool:
            s = fake_clock(c, "n1") - time.time()
            seen.add("skewed" if 3 < s < 7 else "true" if abs(s) < 1 else "?")
            return {"skewed", "true"} <= seen

        wait_until(both, timeout=60, what="both clock states")
        fault.stop()
        wait_until(lambda: abs(fake_clock(c, "n1") - time.time()) < 1, what="true time after stop")


def _synced(c, n: str) -> int:
    return int(Path(c.lifecycle.spec(n).path("synced")).read_text())


def _segment_lines(c, n: str) -> list[str]:
    seg = c.lifecycle.spec(n).path("data") + "/topic-0/00000000000000000001.seg"
    out = c.hosts[n].exec(["cat", seg]).out  # through the node's own view (the FUSE mount)
    return out.splitlines()


def test_lose_unfsynced_drops_exactly_the_unsynced_tail(tmp_path):
    with fake_cluster(1, tmp_path, lazyfs=True) as c:
        wait_until(lambda: len(_segment_lines(c, "n1")) >= 23, what="some writes")
        c.lifecycle.kill("n1")
        written = _segment_lines(c, "n1")
        synced = _synced(c, "n1")
        assert synced % 5 == 0 and len(written) >= synced
        drop_unsynced(c.hosts["n1"], c.lifecycle.spec("n1"))
        after = _segment_lines(c, "n1")
        # Lines up to the last multiple of 5 were fsynced (unless the kill fell between that
        # write and its fsync); everything after it was not, and must be gone.
        n = len(written)
        assert after == written[: len(after)] and len(after) >= synced
        assert len(after) == n - n % 5 or (n % 5 == 0 and len(after) == n - 5), (n, len(after))
        # and the restarted writer continues from what survived
        c.lifecycle.start("n1")
        wait_until(lambda: len(_segment_lines(c, "n1")) > synced + 5, what="writes after restart")


@pytest.mark.slow
def test_disk_fault_lose_unfsynced_and_corrupt_tail(tmp_path):
    with fake_cluster(3, tmp_path, lazyfs=True) as c:
        fault = DiskFault(c, random.Random(1), data_files=SEGMENTS)
        assert set(fault.variants) == {"lose-unfsynced", "corrupt-tail"}
        for n in c.nodes:
            wait_until(lambda n=n: len(_segment_lines(c, n)) >= 12, what=f"writes on {n}")
        desc = fault.start("corrupt-tail")
        (node,) = fault.crashed
        assert "truncated" in desc or "flipped" in desc
        assert ".seg" in desc
        assert not c.lifecycle.is_up(node)
        fault.stop()
        assert c.lifecycle.is_up(node)
        desc = fault.start("lose-unfsynced")
        assert "unsynced writes dropped" in desc
        fault.heal()
        assert all(c.lifecycle.is_up(n) for n in c.nodes)


def test_corrupt_tail_really_changes_the_tail(tmp_path):
    with fake_cluster(1, tmp_path) as c:
        wait_until(lambda: len(_segment_lines(c, "n1")) >= 10, what="writes")
        c.lifecycle.kill("n1")
        before = _segment_lines(c, "n1")
        fault = DiskFault(c, random.Random(0), data_files=SEGMENTS)
        assert fault.variants == ("corrupt-tail",)  # no LazyFS: only what works without it
        fault.rng = random.Random(4)
        fault.crashed = []
        out = fault._corrupt("n1")
        after = _segment_lines(c, "n1")
        assert after != before and "00000000000000000001.seg" in out
        assert after[:-8] == before[: len(after[:-8])]  # only the tail was touched


@pytest.mark.slow
def test_disk_power_loss_crashes_every_node_and_drops_their_unsynced_tails(tmp_path):
    with fake_cluster(3, tmp_path, lazyfs=True) as c:
        fault = DiskFault(c, random.Random(2), data_files=SEGMENTS)
        assert "power-loss" not in fault.variants  # named only, never drawn at random
        for n in c.nodes:
            wait_until(lambda n=n: len(_segment_lines(c, n)) >= 13, what=f"writes on {n}")
        before = {n: _segment_lines(c, n) for n in c.nodes}
        desc = fault.start("power-loss")
        assert desc.startswith("power-loss: ") and desc.count("unsynced writes dropped") == 3
        assert fault.crashed == c.nodes and not any(c.lifecycle.is_up(n) for n in c.nodes)
        for n in c.nodes:
            after = _segment_lines(c, n)
            # what survives is a prefix of what was written, ending at an fsync (every 5th line)
            assert after == before[n][: len(after)] or before[n] == after[: len(before[n])]
            assert len(after) % 5 == 0, (n, len(after))
        assert fault.stop() == f"started {','.join(c.nodes)}"
        assert all(c.lifecycle.is_up(n) for n in c.nodes)


def test_disk_power_loss_needs_lazyfs(tmp_path):
    with fake_cluster(1, tmp_path) as c:
        with pytest.raises(ValueError, match="needs LazyFS"):
            DiskFault(c, random.Random(0), data_files=SEGMENTS).start("power-loss")
        assert c.lifecycle.is_up("n1")  # refused before touching anything


@pytest.mark.slow
def test_stale_leader_isolates_then_restarts_a_quorum_with_the_stale_node(tmp_path):
    from logquake.nemesis import CHAIN, Net, StaleLeaderFault

    with fake_cluster(3, tmp_path) as c:
        net = Net(c.hosts, c.addresses, iptables=c.iptables)
        fault = StaleLeaderFault(c, net, random.Random(5), hold=0.5)
        desc = fault.start("")
        up = [n for n in c.nodes if c.lifecycle.is_up(n)]
        assert len(up) == 2 and len(fault.down) == 1 and fault.down[0] not in up
        stale = desc.split()[0]
        assert stale in up and "isolated 0.5 s; killed " in desc and "network healed" in desc
        assert all(CHAIN not in net.rules(n) for n in c.nodes)  # the stale node can reach its voter
        down = list(fault.down)
        assert fault.stop() == f"started {down[0]}"
        assert all(c.lifecycle.is_up(n) for n in c.nodes)
        fault.heal()
        assert all(c.lifecycle.is_up(n) for n in c.nodes)


def test_partition_replies_silences_brokers_towards_the_clients_one_way(tmp_path):
    from logquake.nemesis import CLIENTS, OUT_CHAIN, Net, PartitionFault

    with fake_cluster(2, tmp_path) as c:
        net = Net(c.hosts, {**c.addresses, CLIENTS: c.harness_address}, iptables=c.iptables)
        fault = PartitionFault(c, net, random.Random(0))
        assert all(port_open(c.addresses[n], 9092) for n in c.nodes)
        assert fault.start("replies") == "replies: n1,n2 drop everything to the clients"
        assert all(f"-A OUTPUT -j {OUT_CHAIN}" in net.rules(n) for n in c.nodes)
        # the clients' SYNs arrive, the SYN-ACKs do not: no connection from the harness
        assert not any(port_open(c.addresses[n], 9092) for n in c.nodes)
        assert fault.stop() == "network healed"
        assert all(OUT_CHAIN not in net.rules(n) for n in c.nodes)
        assert all(port_open(c.addresses[n], 9092) for n in c.nodes)
        fault.start("replies")
        fault.heal()  # the thorough heal removes it too
        assert all(OUT_CHAIN not in net.rules(n) for n in c.nodes)


@pytest.mark.slow
def test_pause_kill_crashes_one_node_losing_its_unsynced_writes_while_another_is_paused(tmp_path):
    from logquake.nemesis import PauseKillFault

    with fake_cluster(3, tmp_path, lazyfs=True) as c:
        fault = PauseKillFault(c, random.Random(7), hold=0.5)
        assert fault.variants == fault.accepts == ()
        for n in c.nodes:
            wait_until(lambda n=n: len(_segment_lines(c, n)) >= 13, what=f"writes on {n}")
        desc = fault.start("")
        (away,), (crashed,) = fault.away, fault.crashed
        (rest,) = set(c.nodes) - {away, crashed}
        assert desc == f"paused {away}; 0.5 s later crashed {crashed}, its unsynced writes dropped"
        assert _state(c.lifecycle.pid(away)) == "T" and not c.lifecycle.is_up(crashed)
        assert len(_segment_lines(c, crashed)) % 5 == 0  # the crash kept only what was fsynced (every 5th line)
        moving = fake_counter(c, rest)
        wait_until(lambda: fake_counter(c, rest) >= moving + 5, what="the third node to go on")
        assert fault.stop() == f"started {crashed}; resumed {away}"
        assert (fault.away, fault.crashed) == ([], [])
        assert all(c.lifecycle.is_up(n) for n in c.nodes)
        frozen = fake_counter(c, away)
        wait_until(lambda: fake_counter(c, away) > frozen, what="the paused node to go on")
        fault.start("")
        paused = fault.away[0]
        fault.heal()
        assert all(c.lifecycle.is_up(n) for n in c.nodes) and _state(c.lifecycle.pid(paused)) != "T"


@pytest.mark.slow
def test_partition_kill_crashes_one_node_losing_its_unsynced_writes_while_another_is_cut_off(tmp_path):
    from logquake.nemesis import CHAIN, Net, PartitionKillFault

    with fake_cluster(3, tmp_path, lazyfs=True) as c:
        net = Net(c.hosts, c.addresses, iptables=c.iptables)
        fault = PartitionKillFault(c, net, random.Random(3), hold=0.5)
        for n in c.nodes:
            wait_until(lambda n=n: len(_segment_lines(c, n)) >= 13, what=f"writes on {n}")
        desc = fault.start("")
        (away,), (crashed,) = fault.away, fault.crashed
        assert desc.startswith(f"isolated {away}: ") and desc.endswith(f"0.5 s later crashed {crashed}, "
                                                                       "its unsynced writes dropped")
        assert all(CHAIN in net.rules(n) for n in c.nodes)
        assert port_open(c.addresses[away], 9092)  # cut off from the nodes, not from the clients
        assert not c.lifecycle.is_up(crashed) and len(_segment_lines(c, crashed)) % 5 == 0
        assert fault.stop() == f"started {crashed}; network healed"
        assert all(CHAIN not in net.rules(n) for n in c.nodes)
        assert all(c.lifecycle.is_up(n) for n in c.nodes)
        fault.start("")
        fault.heal()
        assert all(CHAIN not in net.rules(n) for n in c.nodes)
        assert all(c.lifecycle.is_up(n) for n in c.nodes)

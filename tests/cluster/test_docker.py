"""The docker backend: containers on a user network, every fault through exec in them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logquake.cluster import open_cluster
from logquake.cluster.conformance import check_host
from logquake.cluster.docker import LABEL, docker_client
from logquake.cluster.shims import faketime_env, set_clock
from logquake.config import resolve_config
from logquake.nemesis import node_needs

from .dockerkit import require_docker
from .labkit import wait_until


def _leftovers(cid: str) -> list[str]:
    client = docker_client()
    return ([c.name for c in client.containers.list(all=True, filters={"label": f"{LABEL}={cid}"})]
            + [n.name for n in client.networks.list(filters={"label": f"{LABEL}={cid}"})])


def test_docker_nodes_meet_the_host_contract_and_take_faults(tmp_path):
    """Containers, fixed addresses, exec; partitions in the containers' iptables; signals. No brokers
    (the slow runs below drive real brokers through the same calls)."""
    require_docker()
    import random
    import signal

    from logquake.cluster.host import pid_alive, wait_dead
    from logquake.nemesis import Net, make_grudge

    cfg = resolve_config(None, {"backend": "docker", "nodes": 3, "replication_factor": 3})
    with open_cluster(cfg, tmp_path, start=False) as cluster:
        cid = docker_client().containers.get(cluster.hosts["n1"].container).labels[LABEL]
        assert _leftovers(cid)
        host = cluster.hosts["n1"]
        check_host(host, "/tmp/work")
        for n, h in cluster.hosts.items():  # each container has its own fixed address
            assert cluster.addresses[n] in h.exec(["ip", "-4", "-o", "addr"]).out
        # a partition through iptables in the containers (NET_ADMIN), then healed
        net = Net(cluster.hosts, cluster.addresses, iptables=cluster.iptables)
        grudge = make_grudge("majority", cluster.nodes, random.Random(1))
        net.drop(grudge)
        victim = next(n for n in cluster.nodes if grudge.get(n))
        assert "-j DROP" in net.rules(victim)
        net.heal()
        assert "LOGQUAKE" not in net.rules(victim)
        # SIGSTOP / SIGCONT / SIGKILL as the pause and kill faults send them
        pid = host.spawn(["sleep", "300"], pidfile="/tmp/s.pid", logfile="/tmp/s.log")
        host.signal(pid, signal.SIGSTOP)
        wait_until(lambda: "T" in host.exec(["ps", "-o", "stat=", "-p", str(pid)]).out, what="stopped")
        host.signal(pid, signal.SIGCONT)
        host.signal(pid, signal.SIGKILL)
        assert wait_dead(host, pid) and not pid_alive(host, pid)
    assert _leftovers(cid) == [], "teardown must remove containers and network"


@pytest.mark.slow
def test_docker_broker_lifecycle(tmp_path):
    require_docker()
    cfg = resolve_config(None, {"backend": "docker", "nodes": 3, "replication_factor": 3})
    with open_cluster(cfg, tmp_path) as cluster:
        lc = cluster.lifecycle
        cluster.wait_ready(120)
        assert lc.kill("n2") and not lc.is_up("n2")
        lc.start("n2")
        assert lc.pause("n3") and "T" in host_stat(cluster, "n3")
        assert lc.resume("n3")
        wait_until(lambda: "T" not in host_stat(cluster, "n3"), what="n3 resumed")
        cluster.wait_ready(120)
        cluster.collect_logs(tmp_path / "logs")
        assert (tmp_path / "logs" / "n1" / "broker.log").is_file()


def host_stat(cluster, node: str) -> str:
    pid = cluster.lifecycle.pid(node)
    return cluster.hosts[node].exec(["ps", "-o", "stat=", "-p", str(pid)]).out


def test_clock_fault_reaches_the_broker_through_faketime(tmp_path):
    require_docker()
    cfg = resolve_config(None, {"backend": "docker", "nodes": 1, "replication_factor": 1, "nemesis": "clock"})
    with open_cluster(cfg, tmp_path, start=False, needs=node_needs(cfg.nemesis)) as cluster:
        lc, host = cluster.lifecycle, cluster.hosts["n1"]
        set_clock(host, lc.spec("n1"), 3600.0)
        env = faketime_env(lc.spec("n1"), lc.faketime_site)
        script = "import time; print(int(time.time()))"
        rc, out, err = host.exec(["env", *(f"{k}={v}" for k, v in env.items()), lc.python, "-c", script])
        assert rc == 0, err
        rc2, real, _ = host.exec(["date", "+%s"])
        assert int(out) - int(real) > 3000, (out, real)


@pytest.mark.slow
def test_short_docker_run_with_partitions_and_kills(tmp_path):
    require_docker()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--backend", "docker", "--nodes", "3", "--nemesis",
           "partition,kill", "--nemesis-interval", "2", "--time-limit", "12", "--rate", "40", "--concurrency", "3",
           "--seed", "5", "--results-dir", str(results)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    out = p.stdout + p.stderr
    run_dir = (results / "latest").resolve()
    assert (run_dir / "results.json").is_file(), out[-3000:]
    res = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    faults = [o["value"] for o in ops if o.get("process") == "nemesis" and o["f"].startswith("start-")]
    assert faults, out[-2000:]
    # a fault may take every broker down for a while: ask for progress, not throughput
    assert sum(o.get("type") == "ok" for o in ops) > 10, out[-2000:]
    assert res.get("valid") is True, f"{json.dumps(res)[:2000]}\n{out[-2000:]}"
    assert any((run_dir / "nodes").rglob("broker.log")), "node logs must be collected from the containers"
    assert not docker_client().containers.list(all=True, filters={"label": LABEL}), "containers left behind"


def test_clusters_of_a_dead_harness_are_reaped():
    require_docker()
    from logquake.cluster.docker import IMAGE, OWNER, reap_orphans

    client = docker_client()
    cid = "dead" + os_urandom_hex()
    client.containers.create(IMAGE, ["sleep", "infinity"], name=f"lq-{cid}-n1", labels={LABEL: cid, OWNER: "1:0.00"})
    assert _leftovers(cid)
    assert cid in reap_orphans(client)
    assert _leftovers(cid) == []


def os_urandom_hex() -> str:
    import os

    return os.urandom(2).hex()

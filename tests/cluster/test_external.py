"""The external backend: the queue workload against a cluster logquake did not start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from logquake.broker import LocalCluster
from logquake.cluster import open_cluster
from logquake.config import resolve_config
from logquake.errors import ConfigError


def _run(tmp_path: Path, *flags: str) -> tuple[int, Path, dict, str]:
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--results-dir", str(results), *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    out = p.stdout + p.stderr
    run_dir = (results / "latest").resolve()
    assert (run_dir / "results.json").is_file(), out[-3000:]
    return p.returncode, run_dir, json.loads((run_dir / "results.json").read_text()), out


def test_queue_workload_against_a_separately_started_cluster(tmp_path):
    with LocalCluster(n=3, base_dir=tmp_path / "brokers") as brokers:
        brokers.wait_ready()
        quick = tmp_path / "quick.yaml"
        # No faults: nothing to recover from (the runner still waits until the brokers serve).
        # 5 s at 40 ops/s is ~200 ops, four times the 50 asserted below.
        quick.write_text("recovery_time: 0\ndrain_time: 10\n")
        code, run_dir, res, out = _run(tmp_path, "-c", str(quick), "--backend", "external", "--bootstrap-servers",
                                       brokers.bootstrap_servers, "--time-limit", "5", "--rate", "40",
                                       "--concurrency", "3", "--seed", "7")
        assert res.get("valid") is True, f"{json.dumps(res)[:2000]}\n{out[-2000:]}"
        assert code == 0, out[-2000:]
        test = json.loads((run_dir / "test.json").read_text())
        assert test["backend"] == "external" and test["bootstrap_servers"] == brokers.bootstrap_servers.split(",")
        ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
        oks = [o for o in ops if o.get("type") == "ok"]
        assert len(oks) > 50, f"only {len(oks)} ok ops"
        # the brokers are not ours: the run leaves them running
        assert all(brokers.is_up(i) for i in (1, 2, 3))


def test_external_needs_bootstrap_servers_and_hosts_for_faults(tmp_path):
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        open_cluster(resolve_config(None, {"backend": "external"}), tmp_path)
    cfg = resolve_config(None, {"backend": "external", "bootstrap_servers": "127.0.0.1:1", "nemesis": "kill"})
    with pytest.raises(ConfigError, match="need hosts"):
        open_cluster(cfg, tmp_path)
    cfg = resolve_config(None, {"backend": "external", "bootstrap_servers": "127.0.0.1:1", "nemesis": "clock",
                                "hosts": [{"address": "127.0.0.1", "type": "docker", "container": "x"}]})
    with pytest.raises(ConfigError, match="clock cannot act"):
        open_cluster(cfg, tmp_path)


@pytest.mark.slow
def test_external_cluster_with_faults_through_docker_hosts(tmp_path):
    """Brokers someone else started (here: a docker cluster), faults through the docker hosts named in hosts."""
    import yaml

    from logquake.cluster.host import shell_join, spawn_script

    from .dockerkit import require_docker

    require_docker()
    with open_cluster(resolve_config(None, {"backend": "docker", "nodes": 3}), tmp_path / "docker") as brokers:
        brokers.wait_ready(120)
        lc, hosts = brokers.lifecycle, []
        for n in brokers.nodes:
            s = lc.spec(n)
            argv = [lc.python, "-m", "logquake", "broker", "--node-id", str(s.node_id), "--config", s.path("node.yaml")]
            start = shell_join(spawn_script(argv, pidfile=s.path("broker.pid"), logfile=s.path("broker.out"), env={}))
            hosts.append({"name": n, "type": "docker", "container": brokers.hosts[n].container,
                          "address": brokers.addresses[n], "pidfile": s.path("broker.pid"), "start": start})
        config = tmp_path / "external.yaml"
        config.write_text(yaml.safe_dump({
            "backend": "external", "bootstrap_servers": brokers.bootstrap_servers.split(","), "hosts": hosts,
            "nemesis": ["partition", "kill"], "nemesis_interval": 2, "time_limit": 12, "rate": 40,
            "concurrency": 3, "seed": 11, "recovery_time": 3,
        }))
        code, run_dir, res, out = _run(tmp_path, "-c", str(config))
        ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
        faults = [o["value"] for o in ops if o.get("process") == "nemesis" and o["f"].startswith("start-")]
        assert any(str(f).startswith("killed") for f in faults) or any("drops" in str(f) for f in faults), faults
        assert res.get("valid") is True, f"{json.dumps(res)[:2000]}\n{out[-2000:]}"
        # healed and left running: the cluster is not ours to stop
        assert all(lc.is_up(n) for n in brokers.nodes)

"""`logquake run --system jetstream --workload kv` end to end: a KV bucket's keys as cas registers
under real partitions, on a 3-node lab, judged by the linearizability checker."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.test_run import _run

pytestmark = pytest.mark.lab


def test_kv_with_leader_reads_stays_linearizable_under_partitions(tmp_path: Path) -> None:
    # Seed 4's schedule (drawn from the seed alone): a partition at 4.2-7.0 s, reads, writes and
    # cas across its heal, and another from 8.7 s that the final heal ends at the 10 s limit.
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--workload", "kv", "--nemesis", "partition",
                                   "--nemesis-interval", "3", "--time-limit", "10", "--seed", "4")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), out)
    assert (res["linear"]["model"], res["linear"]["keys"], res["linear"]["invalid_keys"]) == ("cas-register", 5, 0)
    test = json.loads((run_dir / "test.json").read_text())
    assert (test["system"], test["workload"], test["client"]) == ("jetstream", "kv", "nats-py")
    profile = test["profile"]
    assert profile["consumer_config"]["allow_direct"] is False and profile["allowed_anomalies"] == []
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    done = Counter(op["f"] for op in history if op["type"] == "ok" and op["process"] != "nemesis")
    assert min(done["read"], done["write"], done["cas"]) > 0, done
    assert "start-partition" in {op["f"] for op in history if op["process"] == "nemesis"}


@pytest.mark.slow
def test_kv_with_direct_reads_serves_stale_values_after_a_partition(tmp_path: Path) -> None:
    # docs/jetstream-kv.md: a replica cut off answers direct gets from what it has applied,
    # during the partition and while it catches up after; the register checker sees it.
    (tmp_path / "kv-direct.yaml").write_text("system: jetstream\nworkload: kv\njetstream: {kv_reads: direct}\n")
    code, run_dir, res, out = _run(tmp_path, "-c", str(tmp_path / "kv-direct.yaml"), "--nodes", "3",
                                   "--nemesis", "partition", "--nemesis-interval", "3", "--time-limit", "30",
                                   "--seed", "5")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (1, False), out

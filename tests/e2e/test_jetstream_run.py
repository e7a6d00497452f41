"""`logquake run --system jetstream` end to end: nats-server on a 3-node lab, nats-py clients, real faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_run import _run

pytestmark = pytest.mark.lab


def test_jetstream_under_partitions_and_kills_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    # A flip every 3 s on average; seed 31's schedule (FlipFlop: drawn from the seed alone, the
    # time limit only stops new starts) gives both families their turn in 12 s: a partition at
    # 0.2-3.7 s, kills at 5.9-7.3 s and 8.0-10.0 s, then 2 s of load on a whole cluster.
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--nemesis", "partition,kill",
                                   "--nemesis-interval", "3", "--time-limit", "12", "--seed", "31")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), out)
    test = json.loads((run_dir / "test.json").read_text())
    assert (test["system"], test["client"]) == ("jetstream", "nats-py")
    assert test["server"]["version"] == "v2.15.1" and test["server"]["stream_replicas"] == 3
    final = res["final_read"]
    assert final["ran"] and final["lost"] == 0 and final["acknowledged"] > 0 and not final["incomplete_keys"]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    faults = {op["f"] for op in history if op["process"] == "nemesis"}
    assert {"start-partition", "start-kill"} <= faults, faults
    logs = {p.name for p in (run_dir / "nodes").rglob("nats-server.log")}
    assert logs, "the servers' logs were collected"
    assert_every_node_read_everything(run_dir, res, history)


def assert_every_node_read_everything(run_dir: Path, res: dict, history: list[dict]) -> None:
    """The drain's final read from every node reaches results.json, the history and the report:
    nodes killed or cut off were healed and given the recovery time, so each holds every value."""
    nodes = res["final_read"]["nodes"]
    assert sorted(nodes) == ["n1", "n2", "n3"], nodes
    for node, entry in nodes.items():
        assert entry["status"] == "complete" and entry["missing"] == 0, (node, entry)
        assert entry["keys"] == res["final_read"]["keys"] and not entry["incomplete_keys"], (node, entry)
    assert res["drain"]["node_reads"] == {"n1": True, "n2": True, "n3": True}
    assert {op["node"] for op in history if op.get("final") and "node" in op} == {"n1", "n2", "n3"}
    assert "final read from each node" in (run_dir / "report.html").read_text()


def test_jetstream_transactions_are_atomic_batches_under_kills(tmp_path: Path) -> None:
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--txn", "--nemesis", "kill",
                                   "--nemesis-interval", "3", "--time-limit", "15", "--seed", "25")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), out)
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    batches = [op for op in history if op["type"] == "ok" and op["f"] in ("send", "txn")]
    assert any(len(op["value"]) > 1 for op in batches), "some committed batches hold several sends"
    assert all(len({m[1] for m in op["value"]}) == 1 for op in batches), "a batch is one key's"
    assert any(op.get("abort") for op in history if op["type"] != "invoke"), "the workload aborts some"
    assert res["final_read"]["lost"] == 0


@pytest.mark.slow
def test_jetstream_power_loss_at_the_default_sync_interval_loses_acknowledged_writes(tmp_path: Path) -> None:
    # The server acknowledges a publish once a majority holds it in memory and fsyncs every
    # sync_interval (2 min by default): a power loss of every node inside that window loses
    # every acknowledged write since the last sync. The verdict this deserves is a loss.
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--nemesis", "disk:power-loss",
                                   "--nemesis-interval", "4", "--time-limit", "20", "--seed", "1")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (1, False), (res.get("anomalies"), out)
    assert "lost" in res["anomalies"] and res["final_read"]["lost"] > 0
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    power_cuts = [op for op in history if op["f"] == "start-disk:power-loss"]
    assert power_cuts and all(op["value"].count("unsynced writes dropped") == 3 for op in power_cuts)
    first_cut = power_cuts[0]["time"]
    # every lost write was acknowledged before a power loss, none after the last one healed
    for case in res["anomalies"]["lost"]["errs"]:
        assert case["acknowledged"]["time"] < power_cuts[-1]["time"], case
    assert any(case["acknowledged"]["time"] < first_cut for case in res["anomalies"]["lost"]["errs"])


@pytest.mark.slow
def test_jetstream_power_loss_with_sync_always_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    (tmp_path / "sync.yaml").write_text("jetstream:\n  sync_interval: always\n")
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--nemesis", "disk:power-loss",
                                   "--config", str(tmp_path / "sync.yaml"),
                                   "--nemesis-interval", "4", "--time-limit", "20", "--seed", "1")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), out)
    final = res["final_read"]
    assert final["ran"] and final["lost"] == 0 and final["acknowledged"] > 0 and not final["incomplete_keys"]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert any(op["f"] == "start-disk:power-loss" for op in history)

"""`logquake run --system jetstream` end to end: nats-server on a 3-node lab, nats-py clients, real faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_run import _run

pytestmark = pytest.mark.lab


def test_jetstream_under_partitions_and_kills_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    # A flip every 3 s on average: both families get their turn in 20 s.
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--nemesis", "partition,kill",
                                   "--nemesis-interval", "3", "--time-limit", "20", "--seed", "31")
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

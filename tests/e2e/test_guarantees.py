"""`logquake run --guarantee ...` end to end against the default lab broker under faults.

Each profile's run must be valid (the broker keeps every promise), print its profile and
client configs at start, and store them in test.json. One short run is in the default suite;
the others are slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_root_or_userns

pytestmark = pytest.mark.lab


def _run(tmp_path: Path, guarantee: str, nemesis: str, seed: int, interval: float = 3,
         time_limit: float = 15, client: str = "confluent") -> tuple[int, Path, dict, str]:
    requires_root_or_userns()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--results-dir", str(results), "--nodes", "3",
           "--guarantee", guarantee, "--nemesis", nemesis, "--nemesis-interval", str(interval),
           "--time-limit", str(time_limit), "--rate", "40", "--concurrency", "4", "--seed", str(seed), "--client", client]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    out = p.stdout + p.stderr
    latest = results / "latest"
    assert latest.exists(), f"no run directory; output:\n{out}"
    run_dir = latest.resolve()
    res_path = run_dir / "results.json"
    res = json.loads(res_path.read_text()) if res_path.exists() else {}
    return p.returncode, run_dir, res, out


def _check(tmp_path: Path, guarantee: str, nemesis: str, seed: int, interval: float = 3,
           time_limit: float = 15, client: str = "confluent") -> dict:
    code, run_dir, res, out = _run(tmp_path, guarantee, nemesis, seed, interval, time_limit, client)
    assert res.get("valid") is True, f"{json.dumps(res, indent=1)[:3000]}\n{out[-3000:]}"
    assert code == 0, out
    assert f"guarantee {guarantee}" in out, out[:2000]
    test = json.loads((run_dir / "test.json").read_text())
    assert test["guarantee"] == guarantee and test["profile"]["guarantee"] == guarantee
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    ok_sends = sum(1 for op in ops if op["type"] == "ok" and op["f"] in ("send", "txn")
                   and any(m[0] == "send" for m in op["value"]))
    assert ok_sends > 0, "no send was acknowledged: the run tested nothing"
    return test["profile"]


def _exactly_once(prof: dict) -> None:
    assert prof["producer_config"]["enable.idempotence"] is True
    assert prof["consumer_config"]["isolation.level"] == "read_committed"
    assert "duplicate" not in prof["allowed_anomalies"] and "lost-write" not in prof["allowed_anomalies"]


# After a commit of unknown outcome a client replaces its producer but keeps its
# transactional id, so the new producer's init_transactions ends the old transaction at once.
# Under a fresh id the old transaction would stay open, holding its partitions' last stable
# offset until the coordinator timed it out, and an exactly-once run under kills would end
# `unseen` (tests/workloads/test_adapters.py pins the id against real brokers).


@pytest.mark.slow
def test_exactly_once_under_kills_is_valid(tmp_path):
    # Transactions make little progress while kills come every 3 s: fewer faults, and time
    # to work after the first fault (which takes down every node for ~12 s with this seed).
    _exactly_once(_check(tmp_path, "exactly-once", "kill", 14, interval=8, time_limit=30))


@pytest.mark.slow
def test_exactly_once_with_kafka_python_under_kills_is_valid(tmp_path):
    # This seed once acked a txn whose expired batch kafka-python had dropped (the adapter
    # now aborts such a transaction before committing).
    prof = _check(tmp_path, "exactly-once", "kill", 14, interval=8, time_limit=30, client="kafka-python")
    assert prof["producer_config"]["enable_idempotence"] is True
    assert prof["consumer_config"]["isolation_level"] == "read_committed"


@pytest.mark.slow
def test_exactly_once_under_partitions_is_valid(tmp_path):
    _exactly_once(_check(tmp_path, "exactly-once", "partition", 11))


def test_at_least_once_under_kills_is_valid(tmp_path):
    prof = _check(tmp_path, "at-least-once", "kill", 12)
    assert prof["producer_config"]["enable.idempotence"] is False
    assert "duplicate" in prof["allowed_anomalies"] and "lost-write" not in prof["allowed_anomalies"]


@pytest.mark.slow
def test_at_most_once_under_kills_is_valid(tmp_path):
    prof = _check(tmp_path, "at-most-once", "kill", 13)
    assert prof["producer_config"]["retries"] == 0
    assert "lost-write" in prof["allowed_anomalies"] and "duplicate" not in prof["allowed_anomalies"]


@pytest.mark.slow
def test_exactly_once_pipeline_under_kills_processes_every_input_once(tmp_path):
    requires_root_or_userns()
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text("workload: pipeline\nguarantee: exactly-once\n")
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--config", str(cfg), "--results-dir", str(results),
           "--nodes", "3", "--nemesis", "kill", "--nemesis-interval", "4", "--time-limit", "15",
           "--rate", "20", "--concurrency", "2", "--seed", "15"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    out = p.stdout + p.stderr
    res = json.loads(((results / "latest").resolve() / "results.json").read_text())
    assert res.get("valid") is True, f"{json.dumps(res, indent=1)[:3000]}\n{out[-3000:]}"
    assert res["inputs"] > 0 and res["processing_counts"] == {"1": res["inputs"]}, res
    assert p.returncode == 0, out

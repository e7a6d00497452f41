"""`logquake run --system jetstream --workload pipeline` end to end: nats-server on a 3-node lab, kills."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.test_run import _run

pytestmark = pytest.mark.lab


def _history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_jetstream_exactly_once_pipeline_under_kills_processes_every_input_once(tmp_path: Path) -> None:
    # Msg-Id dedup on the output plus a double ack of the input: what NATS offers as exactly-once.
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--workload", "pipeline",
                                   "--guarantee", "exactly-once", "--nemesis", "kill", "--nemesis-interval", "4",
                                   "--time-limit", "20", "--rate", "20", "--concurrency", "3", "--seed", "7")
    assert "Traceback" not in out, out
    assert (code, res["valid"], res["bad_error_types"]) == (0, True, []), (res, out[-3000:])
    assert res["inputs"] > 100 and res["processing_counts"] == {"1": res["inputs"]}, res
    test = json.loads((run_dir / "test.json").read_text())
    assert (test["system"], test["client"], test["workload"]) == ("jetstream", "nats-py", "pipeline")
    history = _history(run_dir)
    assert any(op["f"] == "start-kill" for op in history if op["process"] == "nemesis")
    assert any(op["f"] == "process" and op["type"] == "ok" for op in history)
    finals = [op for op in history if op["f"] == "poll" and op.get("final") and op["type"] == "ok"]
    assert finals and len(finals[0]["ends"]) == 4, finals[:1]


@pytest.mark.slow
def test_jetstream_at_least_once_pipeline_under_kills_loses_nothing(tmp_path: Path) -> None:
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--workload", "pipeline",
                                   "--guarantee", "at-least-once", "--nemesis", "kill", "--nemesis-interval", "4",
                                   "--time-limit", "20", "--rate", "20", "--concurrency", "3", "--seed", "7")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res, out[-3000:])
    assert res["inputs"] > 100 and "0" not in res["processing_counts"], res


OLD_SERVER = "/usr/sbin/nats-server"  # Debian's 2.9.10: no atomic batches (2.12+)


@pytest.mark.slow  # ~45 s: 20 s of kills, recovery, drain
@pytest.mark.skipif(not os.access(OLD_SERVER, os.X_OK), reason="no Debian nats-server (apt-get install nats-server)")
def test_exactly_once_pipeline_runs_on_a_server_without_atomic_batches(tmp_path: Path) -> None:
    # Its exactly-once is Msg-Id dedup and a double ack, which 2.9.10 has: not refused, and kept.
    (tmp_path / "old.yaml").write_text(f"system: jetstream\njetstream: {{binary: {OLD_SERVER}}}\n")
    code, run_dir, res, out = _run(tmp_path, "--config", str(tmp_path / "old.yaml"), "--workload", "pipeline",
                                   "--guarantee", "exactly-once", "--nemesis", "kill", "--nemesis-interval", "4",
                                   "--time-limit", "20", "--rate", "20", "--concurrency", "3", "--seed", "7")
    assert "Traceback" not in out, out
    test = json.loads((run_dir / "test.json").read_text())
    assert test["server"]["version"].startswith("v2.9."), test["server"]
    assert test["txn"] is False  # no transactions asked of it
    assert (code, res["valid"], res["bad_error_types"]) == (0, True, []), (res, out[-3000:])
    assert res["inputs"] > 100 and res["processing_counts"] == {"1": res["inputs"]}, res
    assert any(op["f"] == "start-kill" for op in _history(run_dir) if op["process"] == "nemesis")

"""`logquake run --system jetstream`: the drain's final read from every node reaches results.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.test_jetstream_run import assert_every_node_read_everything
from tests.e2e.test_run import _run

# Slow: the same assertions run in the default suite on the partition+kill run of
# tests/e2e/test_jetstream_run.py (assert_every_node_read_everything).
pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_jetstream_run_reports_the_final_read_of_every_node(tmp_path: Path) -> None:
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--nemesis", "kill", "--nemesis-interval", "3",
                                   "--time-limit", "8", "--seed", "4")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), res.get("final_read"), out)
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert_every_node_read_everything(run_dir, res, history)


OLD_SERVER = "/usr/sbin/nats-server"  # Debian's 2.9.10: no message tracing (2.11+)


@pytest.mark.slow  # ~35 s
@pytest.mark.skipif(not os.access(OLD_SERVER, os.X_OK), reason="no Debian nats-server (apt-get install nats-server)")
def test_on_a_server_without_message_tracing_the_node_reads_are_skipped_saying_why(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text(f"system: jetstream\njetstream: {{binary: {OLD_SERVER}}}\n")
    code, run_dir, res, out = _run(tmp_path, "--config", str(tmp_path / "old.yaml"), "--nemesis", "none",
                                   "--time-limit", "10", "--seed", "4")
    assert "Traceback" not in out, out
    version = json.loads((run_dir / "test.json").read_text())["server"]["version"].lstrip("v")
    why = f"needs nats-server 2.11+ (message tracing, batched direct gets), this is {version}"
    # The verdict rests on the combined final read, which ran; no node was read alone.
    assert (code, res["valid"], res["final_read"]["ran"]) == (0, True, True), (res.get("anomalies"), out[-3000:])
    assert res["drain"]["node_reads_skipped"] == why and "node_reads" not in res["drain"], res["drain"]
    assert "nodes" not in res["final_read"]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert not [op for op in history if "node" in op]
    log = (run_dir / "harness.log").read_text()
    lines = [line for line in log.splitlines() if why in line]
    assert len(lines) == 1 and "no final read from each node" in lines[0], log[-3000:]
    assert f"Not run: {why}" in (run_dir / "report.html").read_text()

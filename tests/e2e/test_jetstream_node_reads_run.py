"""`logquake run --system jetstream`: the drain's final read from every node reaches results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_run import _run

# Slow: the same assertions run in the default suite on the partition+kill run of
# tests/e2e/test_jetstream_run.py (assert_every_node_read_everything).
pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_jetstream_run_reports_the_final_read_of_every_node(tmp_path: Path) -> None:
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--nemesis", "kill", "--nemesis-interval", "3",
                                   "--time-limit", "8", "--seed", "4")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), res.get("final_read"), out)
    nodes = res["final_read"]["nodes"]
    assert sorted(nodes) == ["n1", "n2", "n3"], nodes
    for node, entry in nodes.items():
        # Killed nodes were restarted and given the recovery time: each holds every value.
        assert entry["status"] == "complete" and entry["missing"] == 0, (node, entry)
        assert entry["keys"] == res["final_read"]["keys"] and not entry["incomplete_keys"], (node, entry)
    assert res["drain"]["node_reads"] == {"n1": True, "n2": True, "n3": True}
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    read_from = {op["node"] for op in history if op.get("final") and "node" in op}
    assert read_from == {"n1", "n2", "n3"}
    assert "final read from each node" in (run_dir / "report.html").read_text()

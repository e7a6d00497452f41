"""`logquake test-all --shard K/N` and `test-all merge` end to end: real runs on a lab cluster.

A two-cell matrix (one with a fault variant, `partition:leader`, whose name has a colon)
split over two shards, as two CI machines would run it, then merged. Checked: each shard
ran its one run, the merge is the whole matrix with one exit code, and no directory or file
name either shard created (run directories, node logs, reports, indexes) is unportable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import requires_root_or_userns

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NOT_PORTABLE = set(':*?"<>|\\')


def test_two_shards_of_a_real_matrix_merge_into_one_result_with_portable_paths(tmp_path):
    requires_root_or_userns()
    matrix = {
        "test_count": 1, "time_limit": 6, "seed": 3,
        "base": {"nodes": 3, "rate": 20, "concurrency": 2, "nemesis_interval": 2, "recovery_time": 2,
                 "drain_time": 10},
        "safe": {"workloads": {"queue": {}}, "nemeses": ["none", "partition:leader"]},
    }
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    outs = []
    for k in (1, 2):
        p = subprocess.run([sys.executable, "-m", "logquake", "test-all", "--config", str(path), "--shard", f"{k}/2",
                            "--results-dir", str(tmp_path / f"shard-{k}")],
                           capture_output=True, text=True, timeout=600, check=False)
        outs.append(p.stdout + p.stderr)
        [index] = (tmp_path / f"shard-{k}" / "test-all").glob(f"*-shard-{k}-of-2/index.json")
        data = json.loads(index.read_text())
        assert len(data["runs"]) == 1 and data["shard"] == {"index": k, "total": 2}, outs[-1][-3000:]
    p = subprocess.run([sys.executable, "-m", "logquake", "test-all", "merge", str(tmp_path / "shard-1"),
                        str(tmp_path / "shard-2"), "--out", str(tmp_path / "merged")],
                       capture_output=True, text=True, timeout=300, check=False)
    merged = json.loads((tmp_path / "merged" / "index.json").read_text())
    assert [r["cell"] for r in merged["runs"]] == ["safe/queue/none", "safe/queue/partition:leader"], p.stdout
    assert p.returncode == merged["exit_code"], p.stdout + p.stderr
    assert merged["done"] is True and all(r["run_dir"] for r in merged["runs"])
    bad = [os.path.join(d, n) for d, dirs, files in os.walk(tmp_path) for n in dirs + files
           if NOT_PORTABLE & set(n)]
    assert bad == [], bad
    leader_run = next(r["run_dir"] for r in merged["runs"] if "leader" in r["cell"])
    assert os.path.basename(os.path.dirname(leader_run)) == "safe-queue-partition-leader"
    assert os.path.isfile(os.path.join(leader_run, "results.json"))

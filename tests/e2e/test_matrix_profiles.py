"""`logquake test-all --guarantee ...` end to end: one pipeline workload under two profiles.

Real command, real lab cluster, real clients, real kills. Slow (two short runs). What is
checked is the matrix's part: cells per profile, each row, junit case, report and the
profiles page labelled with its profile, outcomes following each run's verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import requires_root_or_userns

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_matrix_runs_the_pipeline_under_two_profiles_and_compares_them(tmp_path):
    requires_root_or_userns()
    matrix = {
        "test_count": 1, "time_limit": 12, "seed": 4,
        "base": {"nodes": 3, "rate": 20, "concurrency": 2, "nemesis_interval": 4, "recovery_time": 3,
                 "drain_time": 20},
        "safe": {"workloads": {"pipeline": {"workload": "pipeline"}}, "nemeses": ["kill"]},
    }
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    results = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "logquake", "test-all", "--config", str(path), "--results-dir",
                        str(results), "--guarantee", "at-least-once,exactly-once"],
                       capture_output=True, text=True, timeout=900, check=False)
    out = p.stdout + p.stderr
    [out_dir] = list((results / "test-all").iterdir())
    index = json.loads((out_dir / "index.json").read_text())
    assert [r["cell"] for r in index["runs"]] == ["safe/pipeline/kill/at-least-once",
                                                  "safe/pipeline/kill/exactly-once"], out[-3000:]
    for r in index["runs"]:
        run_dir = Path(r["run_dir"])
        assert run_dir.is_relative_to(results), r["run_dir"]
        test = json.loads((run_dir / "test.json").read_text())
        assert test["guarantee"] == r["guarantee"] and test["workload"] == "pipeline"
        assert r["processing_counts"], r
        report = (run_dir / "report.html").read_text()
        assert f'data-guarantee="{r["guarantee"]}"' in report and 'id="plot-processing"' in report
    assert [row["guarantee"] for row in index["profiles"]] == ["at-least-once", "exactly-once"]
    props = [c.find("properties/property").get("value")
             for c in ET.parse(out_dir / "junit.xml").getroot().findall("testcase")]
    assert props == ["at-least-once", "exactly-once"]
    profiles = (out_dir / "profiles.html").read_text()
    assert 'id="plot-profiles"' in profiles and profiles.count("report.html</a>") == 2
    assert "per guarantee profile" in out
    # Each row's outcome and the exit code follow its run's own verdict. Whether the profiles keep
    # their promises under kills is tests/e2e/test_guarantees.py's question, not this one's: a
    # broken promise here shows as a "fail" row, which is what the matrix must do with it.
    for r in index["runs"]:
        stored = json.loads((Path(r["run_dir"]) / "results.json").read_text())
        assert r["processing_counts"] == stored["processing_counts"] and r["valid"] == stored["valid"]
        assert r["outcome"] == ("pass" if stored["valid"] is True else "fail"), r
    assert p.returncode == (0 if all(r["outcome"] == "pass" for r in index["runs"]) else 1), out[-3000:]

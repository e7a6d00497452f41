"""The test-all matrix: expansion, verdicts, index and junit output (no clusters here)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

from logquake.errors import ConfigError
from logquake.matrix import (
    DEFAULT_MATRIX,
    Cell,
    exit_code,
    expand,
    judge,
    load_matrix,
    parse_matrix,
    render_junit,
    run_matrix,
    summarize,
)

SAFE = Cell(name="safe/queue/kill", config={"nemesis": ["kill"]})
ACK = Cell(name="unsafe/ack-early/partition", config={}, expect=("lost-write",))


def _res(valid, *bad):
    return {"valid": valid, "bad_error_types": list(bad), "anomalies": {b: {"count": 2, "errs": []} for b in bad}}


def test_the_default_matrix_covers_every_unsafe_mode_and_nemesis():
    m = load_matrix(None)
    modes = {k for c in m.cells for k in c.config.get("broker", {}).get("unsafe", {})}
    assert modes == {"dedup", "ack", "election", "fsync", "txn_markers", "read_committed"}
    safe = [c for c in m.cells if not c.expect]
    assert {n for c in safe for n in c.config["nemesis"]} == {"partition", "kill", "pause", "clock", "disk", "packet-loss"}
    assert any(c.config.get("txn") for c in safe) and any(not c.config.get("txn") for c in safe)
    assert all(c.expect for c in m.cells if c.config.get("broker", {}).get("unsafe"))


def test_expansion_is_workloads_x_nemeses_plus_modes_times_seeds():
    raw = {"test_count": 3, "seed": 10, "time_limit": 12, "base": {"nodes": 3},
           "safe": {"workloads": {"queue": {}, "txn": {"txn": True}}, "nemeses": ["none", "kill", ["partition", "pause"]]},
           "unsafe": [{"mode": {"ack": "early"}, "nemesis": "partition", "expect": ["lost-write"],
                       "config": {"rate": 200, "broker": {"fsync": "always"}}}]}
    m = parse_matrix(raw)
    names = [c.name for c in m.cells]
    assert names == ["safe/queue/none", "safe/queue/kill", "safe/queue/partition+pause", "safe/txn/none",
                     "safe/txn/kill", "safe/txn/partition+pause", "unsafe/ack-early/partition"]
    runs = expand(m)
    assert len(runs) == 21 and [s for _, s in runs[:3]] == [10, 11, 12]
    ack = m.cells[-1]
    assert ack.config["broker"] == {"fsync": "always", "unsafe": {"ack": "early"}}
    assert ack.config["time_limit"] == 12 and ack.config["rate"] == 200 and ack.config["nemesis"] == ["partition"]
    assert m.cells[3].config["txn"] is True and m.cells[0].config["nemesis"] == []
    assert parse_matrix(raw, test_count=1, time_limit=5).cells[0].config["time_limit"] == 5


@pytest.mark.parametrize("raw, key", [
    ({"bogus": 1}, "matrix.bogus"),
    ({"safe": {"nemeses": ["quake"]}}, "matrix cell safe/queue/quake"),
    ({"unsafe": [{"mode": {"ack": "early"}}]}, "matrix.unsafe[0].expect"),
    ({"unsafe": [{"expect": ["lost-write"]}]}, "matrix.unsafe[0]"),
    ({"base": {"nodes": 0}, "safe": {"nemeses": ["none"]}}, "matrix cell safe/queue/none"),
    ({"safe": {"nemeses": ["none"]}, "test_count": 0}, "test_count"),
    ({"safe": {}}, "matrix"),
    ({"unsafe": [{"mode": {"ack": "late"}, "expect": ["lost-write"]}]}, "matrix.unsafe[0].mode.ack"),
    ({"unsafe": [{"mode": {"acks": "early"}, "expect": ["lost-write"]}]}, "matrix.unsafe[0].mode.acks"),
    ({"unsafe": [{"mode": {"ack": "early"}, "expect": ["lost-write"], "nemeses": ["kill"]}]}, "matrix.unsafe[0].nemeses"),
])
def test_bad_matrices_name_the_key(raw, key):
    with pytest.raises(ConfigError) as e:
        parse_matrix(raw)
    assert e.value.key == key


def test_verdicts():
    assert judge(SAFE, 1, _res(True)).outcome == "pass"
    r = judge(SAFE, 1, _res(False, "lost-write"))
    assert r.outcome == "fail" and "lost-write" in r.message
    assert judge(SAFE, 1, {"valid": "unknown", "error": "budget"}).outcome == "error"
    assert judge(ACK, 1, _res(False, "lost-write", "unseen")).outcome == "pass"
    r = judge(ACK, 1, _res(True))
    assert r.outcome == "fail" and "not caught" in r.message
    r = judge(ACK, 1, _res(False, "duplicate"))
    assert r.outcome == "fail" and "duplicate" in r.message


def test_exit_codes_and_summary():
    ok, bad, unk = judge(SAFE, 1, _res(True)), judge(ACK, 2, _res(True)), judge(SAFE, 3, {"valid": "unknown"})
    assert exit_code([ok]) == 0 and exit_code([ok, unk]) == 2 and exit_code([ok, unk, bad]) == 1
    rows = summarize([ok, judge(SAFE, 2, _res(False, "G1a")), bad])
    assert rows[0]["runs"] == 2 and rows[0]["pass"] == 1 and rows[0]["fail"] == 1 and rows[0]["anomalies"] == {"G1a": 1}
    assert rows[1]["expect"] == ["lost-write"] and rows[1]["fail"] == 1


def test_junit_has_one_case_per_run_and_the_anomalies_in_the_failure():
    runs = [judge(SAFE, 1, _res(True)), judge(SAFE, 2, _res(False, "lost-write", "G1c")),
            judge(ACK, 1, _res(True)), judge(SAFE, 3, {"valid": "unknown"})]
    root = ET.fromstring(render_junit(runs))
    assert root.get("tests") == "4" and root.get("failures") == "2" and root.get("errors") == "1"
    cases = root.findall("testcase")
    assert [c.get("name") for c in cases] == ["seed-1", "seed-2", "seed-1", "seed-3"]
    assert cases[0].get("classname") == "logquake.safe.queue.kill"
    assert "G1c, lost-write" in cases[1].find("failure").get("message")
    assert "not caught" in cases[2].find("failure").get("message")
    assert cases[3].find("error") is not None


def test_run_matrix_writes_index_and_junit_after_each_run(tmp_path):
    m = parse_matrix({"test_count": 2, "safe": {"nemeses": ["none"]},
                      "unsafe": [{"mode": {"dedup": "off"}, "expect": ["duplicate"]}]})
    seen = []

    def run(config):
        # What the runner would return; the unsafe cell "misses" on its second seed.
        seen.append(config)
        index = json.loads((tmp_path / "out" / "index.json").read_text()) if len(seen) > 1 else None
        assert index is None or len(index["runs"]) == len(seen) - 1
        missed = config["broker"].get("unsafe") and config["seed"] == 2 if config.get("broker") else False
        caught = config.get("broker", {}).get("unsafe") and not missed
        return (_res(False, "duplicate") if caught else _res(True)), f"/runs/{len(seen)}"

    runs = run_matrix(m, tmp_path / "out", results_dir=str(tmp_path / "r"), run=run)
    assert [r.outcome for r in runs] == ["pass", "pass", "pass", "fail"]
    assert all(c["results_dir"] == str(tmp_path / "r") for c in seen) and [c["seed"] for c in seen] == [1, 2, 1, 2]
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["done"] is True and index["exit_code"] == 1 and len(index["runs"]) == 4
    assert index["runs"][0]["run_dir"] == "/runs/1"
    assert ET.parse(tmp_path / "out" / "junit.xml").getroot().get("failures") == "1"


def test_cli_rejects_a_bad_matrix_file_without_running_anything(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("unsafe:\n  - mode: {ack: early}\n")
    p = subprocess.run([sys.executable, "-m", "logquake", "test-all", "--config", str(bad), "--results-dir",
                        str(tmp_path / "r")], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "matrix.unsafe[0].expect" in p.stderr
    assert not (tmp_path / "r").exists()


def test_the_default_matrix_is_plain_data():
    assert json.loads(json.dumps(DEFAULT_MATRIX)) == DEFAULT_MATRIX


def test_a_known_gap_is_reported_as_xfail_and_does_not_fail_the_matrix():
    gap = Cell(name="unsafe/read_committed-leak/partition", config={}, expect=("G1a",), known_gap="few aborts")
    missed, caught = judge(gap, 1, _res(True)), judge(gap, 2, _res(False, "G1a"))
    assert missed.outcome == "xfail" and "known gap: few aborts" in missed.message and caught.outcome == "pass"
    assert exit_code([missed, caught]) == 0
    assert judge(SAFE, 1, _res(False, "G1a")).outcome == "fail"  # the safe broker never has a known gap
    root = ET.fromstring(render_junit([missed, caught]))
    assert root.get("skipped") == "1" and root.get("failures") == "0"
    assert root.findall("testcase")[0].find("skipped").get("message").startswith("xfail: not caught")
    assert summarize([missed, caught])[0]["xfail"] == 1
    parsed = parse_matrix({"unsafe": [{"mode": {"ack": "early"}, "expect": ["lost-write"], "known_gap": "why"}]})
    assert parsed.cells[0].known_gap == "why"


def test_yaml_off_is_the_dedup_mode_not_false():
    m = parse_matrix(yaml.safe_load("unsafe:\n  - {mode: {dedup: off}, nemesis: partition, expect: [duplicate]}\n"))
    assert m.cells[0].name == "unsafe/dedup-off/partition"
    assert m.cells[0].config["broker"]["unsafe"] == {"dedup": "off"}

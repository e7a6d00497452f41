"""The test-all matrix: expansion, verdicts, index and junit output (no clusters here)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from logquake.errors import ConfigError
from logquake.matrix import (
    DEFAULT_MATRIX,
    Cell,
    by_profile,
    exit_code,
    expand,
    judge,
    load_matrix,
    parse_matrix,
    run_matrix,
    summarize,
)
from logquake.results.junit import render_junit

SAFE = Cell(name="safe/queue/kill", config={"nemesis": ["kill"]})
ACK = Cell(name="unsafe/ack-early/partition", config={}, expect=("lost-write",))


def _res(valid, *bad):
    return {"valid": valid, "bad_error_types": list(bad), "anomalies": {b: {"count": 2, "errs": []} for b in bad}}


def test_the_default_matrix_covers_every_unsafe_mode_and_nemesis():
    m = load_matrix(None)
    modes = {k for c in m.cells for k in c.config.get("broker", {}).get("unsafe", {})}
    assert modes == {"dedup", "ack", "election", "fsync", "txn_markers", "read_committed"}
    safe = [c for c in m.cells if not c.expect]
    families = {n.partition(":")[0] for c in safe for n in c.config["nemesis"]}
    assert families == {"partition", "kill", "pause", "clock", "disk", "packet-loss", "stale-leader"}
    # the nightly default runs the correct broker under every nemesis the recall matrix measures it under
    recall = yaml.safe_load((Path(__file__).resolve().parents[2] / "docs" / "recall-matrix.yaml").read_text())
    assert set(recall["safe"]["nemeses"]) <= set(DEFAULT_MATRIX["safe"]["nemeses"])
    # each unsafe mode runs under the fault variant that exposes it (docs/recall-matrix.yaml)
    assert [(u["mode"], u["nemesis"]) for u in DEFAULT_MATRIX["unsafe"]] == \
        [({k: str(v) if v is not False else "off" for k, v in u["mode"].items()}, u["nemesis"]) for u in recall["unsafe"]]
    # and the same run settings (recall's base, plus each entry's own config)
    for ours, theirs in zip(DEFAULT_MATRIX["unsafe"], recall["unsafe"], strict=True):
        assert {k: v for k, v in ours.get("config", {}).items() if k != "nemesis_interval"} == \
            {k: v for k, v in theirs.get("config", {}).items() if k != "nemesis_interval"}, ours["mode"]
        assert bool(ours.get("known_gap")) == bool(theirs.get("known_gap")), ours["mode"]  # same gaps declared
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


def test_a_preset_may_name_its_own_nemeses():
    raw = {"safe": {"workloads": {"queue": {}, "big": {"nodes": 5, "nemeses": ["kill", "pause-kill"]}},
                    "nemeses": ["none", "partition"]}}
    names = [c.name for c in parse_matrix(raw).cells]
    assert names == ["safe/queue/none", "safe/queue/partition", "safe/big/kill", "safe/big/pause-kill"]
    big = parse_matrix(raw).cells[-1].config
    assert big["nodes"] == 5 and "nemeses" not in big


@pytest.mark.parametrize("raw, key", [
    ({"bogus": 1}, "matrix.bogus"),
    ({"safe": {"workloads": {"q": {"nemeses": "kill"}}}}, "matrix.safe.workloads.q.nemeses"),
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


# --- the guarantees axis -------------------------------------------------------------------

PIPELINE_DATA = Path(__file__).resolve().parent.parent / "results" / "data" / "pipeline"
AXIS_RAW = {
    "guarantees": ["at-most-once", "at-least-once", "exactly-once"],
    "safe": {"workloads": {"queue": {}, "txn": {"txn": True}, "pipeline": {"workload": "pipeline"},
                           "eo": {"guarantee": "exactly-once"}},
             "nemeses": ["kill"]},
    "unsafe": [{"mode": {"ack": "early"}, "nemesis": "partition", "expect": ["lost-write", "unseen"]},
               {"mode": {"election": "unclean"}, "nemesis": "partition",
                "expect": ["lost-write", "inconsistent-offsets"]},
               {"mode": {"dedup": "off"}, "nemesis": "partition", "expect": ["duplicate"],
                "config": {"guarantee": "exactly-once"}}],
}


def test_the_guarantees_axis_runs_each_cell_under_each_profile_and_labels_it():
    m = parse_matrix(AXIS_RAW)
    by_name = {c.name: c for c in m.cells}
    for g in ("at-most-once", "at-least-once", "exactly-once"):
        for w in ("queue", "pipeline"):
            c = by_name[f"safe/{w}/kill/{g}"]
            assert c.guarantee == c.config["guarantee"] == g and c.config["name"] == f"safe-{w}-kill-{g}"
    # a preset or an unsafe entry naming its own profile keeps it: one cell
    assert by_name["safe/eo/kill"].guarantee == "exactly-once" and "safe/eo/kill/at-most-once" not in by_name
    assert by_name["unsafe/dedup-off/partition"].guarantee == "exactly-once"
    # impossible or meaningless combinations are left out, each with its reason
    assert "safe/txn/kill/at-most-once" not in by_name and "safe/txn/kill/exactly-once" in by_name
    assert any(s.startswith("safe/txn/kill/at-most-once: transactions") for s in m.skipped)
    # an unsafe cell expects only what its profile calls bad
    assert by_name["unsafe/ack-early/partition/exactly-once"].expect == ("lost-write", "unseen")
    assert "unsafe/ack-early/partition/at-most-once" not in by_name
    assert any("ack-early/partition/at-most-once: at-most-once allows every expected anomaly" in s
               for s in m.skipped)
    assert by_name["unsafe/election-unclean/partition/at-most-once"].expect == ("inconsistent-offsets",)
    assert len(m.cells) == 3 * 2 + 2 + 1 + 2 + 3 + 1 and len(m.skipped) == 2


def test_every_cell_of_the_default_matrix_under_every_profile_is_a_config_the_runner_accepts():
    from logquake.config import resolve_config
    from logquake.guarantees import GUARANTEES, apply_guarantee

    m = load_matrix(None, guarantees=list(GUARANTEES))
    for c in m.cells:
        cfg = apply_guarantee(resolve_config(None, c.config))  # raises ConfigError for a bad pairing
        assert cfg.guarantee == c.guarantee, c.name
    assert {c.guarantee for c in m.cells} == set(GUARANTEES)


def test_without_the_axis_names_stay_and_rows_still_carry_their_profile():
    m = load_matrix(None)
    assert all(c.name.count("/") == 2 for c in m.cells) and m.skipped == ()
    assert {c.guarantee for c in m.cells if "dedup" not in c.name} == {"at-least-once"}
    assert next(c for c in m.cells if "dedup" in c.name).guarantee == "idempotent"


def test_the_offsets_workload_is_not_multiplied_by_profiles():
    m = parse_matrix({"guarantees": ["at-least-once", "exactly-once"],
                      "safe": {"workloads": {"offsets": {"workload": "offsets"}, "queue": {}}, "nemeses": ["kill"]}})
    assert [c.name for c in m.cells] == ["safe/offsets/kill", "safe/queue/kill/at-least-once",
                                         "safe/queue/kill/exactly-once"]


def test_the_flag_replaces_the_files_axis_and_takes_commas():
    m = parse_matrix(AXIS_RAW, guarantees=["exactly-once,at-least-once", "exactly-once"])
    assert {c.guarantee for c in m.cells} == {"exactly-once", "at-least-once"}
    assert [c.name for c in m.cells][:2] == ["safe/queue/kill/exactly-once", "safe/queue/kill/at-least-once"]


@pytest.mark.parametrize("raw, flag, key", [
    ({"guarantees": ["exactly-twice"], "safe": {}}, None, "matrix.guarantees"),
    ({"guarantees": [1], "safe": {}}, None, "matrix.guarantees"),
    ({"safe": {"nemeses": ["none"]}}, ["at-most-once", "maybe-once"], "--guarantee"),
    ({"safe": {"workloads": {"txn": {"txn": True}}}}, ["at-most-once"], "matrix"),
])
def test_bad_guarantees_name_the_key(raw, flag, key):
    with pytest.raises(ConfigError) as e:
        parse_matrix(raw, guarantees=flag)
    assert e.value.key == key


def _pipeline_results(g):
    return json.loads((PIPELINE_DATA / g / "results.json").read_text())


def test_rows_junit_and_index_carry_the_profile_and_compare_profiles(tmp_path):
    m = parse_matrix({"guarantees": ["at-least-once", "exactly-once"],
                      "safe": {"workloads": {"pipeline": {"workload": "pipeline"}}, "nemeses": ["kill"]}})
    calls = []

    def run(config):  # the real results.json of a pipeline run under the asked profile
        calls.append(config)
        return _pipeline_results(config["guarantee"]), f"/runs/{config['guarantee']}"

    runs = run_matrix(m, tmp_path / "out", results_dir=str(tmp_path / "r"), run=run)
    assert [c["guarantee"] for c in calls] == ["at-least-once", "exactly-once"]
    assert [(r.guarantee, r.outcome) for r in runs] == [("at-least-once", "pass"), ("exactly-once", "pass")]
    assert runs[0].processing_counts == _pipeline_results("at-least-once")["processing_counts"]
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert [r["guarantee"] for r in index["runs"]] == ["at-least-once", "exactly-once"]
    assert [row["guarantee"] for row in index["summary"]] == ["at-least-once", "exactly-once"]
    alo, eo = index["profiles"]
    assert alo["guarantee"] == "at-least-once" and alo["pipeline_runs"] == 1
    assert alo["processing_counts"] == _pipeline_results("at-least-once")["processing_counts"]
    assert alo["anomalies"] == {"double-processing": 5} and eo["anomalies"] == {}
    cases = ET.parse(tmp_path / "out" / "junit.xml").getroot().findall("testcase")
    assert [c.get("classname") for c in cases] == ["logquake.safe.pipeline.kill.at-least-once",
                                                    "logquake.safe.pipeline.kill.exactly-once"]
    assert [c.find("properties/property[@name='guarantee']").get("value") for c in cases] == \
        ["at-least-once", "exactly-once"]
    html = (tmp_path / "out" / "profiles.html").read_text()
    assert 'id="plot-profiles"' in html and 'data-guarantee="exactly-once"' in html
    runs_table = html[html.index('id="runs-table"'):]
    assert runs_table.count('<tr data-guarantee="at-least-once"><td>safe/pipeline/kill/at-least-once</td>') == 1
    assert "report.html</a>" not in runs_table  # the stand-in runs wrote no reports to link to


def test_by_profile_adds_up_processing_counts_over_runs():
    cell = Cell(name="safe/pipeline/kill/at-least-once", config={}, guarantee="at-least-once")
    res = _pipeline_results("at-least-once")
    rows = by_profile([judge(cell, 1, res), judge(cell, 2, res), judge(SAFE, 1, _res(True))])
    assert rows[0]["runs"] == 2 and rows[0]["pipeline_runs"] == 2
    assert rows[0]["processing_counts"] == {k: 2 * v for k, v in res["processing_counts"].items()}
    assert rows[1]["guarantee"] == "" and rows[1]["processing_counts"] == {}


def test_a_single_profile_matrix_writes_no_profiles_page(tmp_path):
    m = parse_matrix({"safe": {"nemeses": ["none"]}})
    run_matrix(m, tmp_path, run=lambda config: (_res(True), "/runs/1"))
    assert (tmp_path / "index.json").is_file() and not (tmp_path / "profiles.html").exists()


def test_cli_rejects_an_unknown_guarantee_without_running_anything(tmp_path):
    p = subprocess.run([sys.executable, "-m", "logquake", "test-all", "--guarantee", "exactly-twice",
                        "--results-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=120,
                       check=False)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "--guarantee" in p.stderr and "exactly-twice" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r").exists()


def test_recall_table_filters_cells_by_name_part_so_safe_never_selects_unsafe(tmp_path):
    # benchmarks/recall.py --only matches name parts: a plain substring filter would let `safe/txn`
    # select `unsafe/txn_markers-partial/kill` too
    runs = [judge(Cell(name=n, config={}, expect=e), 1, _res(*r)) for n, e, r in (
        ("safe/txn/disk", (), (True,)),
        ("safe/txn/disk:power-loss", (), (True,)),
        ("unsafe/txn_markers-partial/kill", ("unseen",), (False, "unseen")))]
    index = tmp_path / "index.json"
    index.write_text(json.dumps({"runs": [{**r.__dict__} for r in runs]}))
    recall = Path(__file__).resolve().parents[2] / "benchmarks" / "recall.py"

    def cells(*only: str) -> list[str]:
        argv = [sys.executable, str(recall), "--table", str(index)] + [a for o in only for a in ("--only", o)]
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        return [line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ") and "/" in line]

    assert cells("safe/txn") == ["safe/txn/disk", "safe/txn/disk:power-loss"]
    assert cells("safe/txn/disk$") == ["safe/txn/disk"]
    assert cells("txn_markers") == ["unsafe/txn_markers-partial/kill"]

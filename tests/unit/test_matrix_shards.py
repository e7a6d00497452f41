"""test-all over several machines: shards, `--only`, `--shard auto`, `test-all merge`.

A fake run function stands in for the runner: what is tested is which pairs each shard
runs and how shards join, not the runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from rich.console import Console

from logquake.errors import ConfigError, UserError
from logquake.guarantees import GUARANTEES as PROFILES
from logquake.matrix import (
    Shard,
    expand,
    fingerprint,
    load_matrix,
    matches,
    merge_shards,
    parse_matrix,
    parse_shard,
    run_matrix,
    select,
    shard_pairs,
)
from logquake.matrix.verdicts import judge

# 7 cells x 3 seeds
RAW = {"test_count": 3, "seed": 10, "time_limit": 12, "base": {"nodes": 3},
       "safe": {"workloads": {"queue": {}, "txn": {"txn": True}}, "nemeses": ["none", "kill", "partition:leader"]},
       "unsafe": [{"mode": {"ack": "early"}, "nemesis": "partition:leader", "expect": ["lost-write"]}]}


def fake_run(config):
    """The txn cells come out invalid on seed 11 (a fail), the unsafe cell is caught."""
    unsafe = bool(config.get("broker", {}).get("unsafe"))
    if unsafe:
        res = {"valid": False, "bad_error_types": ["lost-write"], "anomalies": {"lost-write": {"count": 1}}}
    elif config.get("txn") and config["seed"] == 11:
        res = {"valid": False, "bad_error_types": ["G1a"], "anomalies": {"G1a": {"count": 2}}}
    else:
        res = {"valid": True, "bad_error_types": [], "anomalies": {}}
    return res, f"results/{config['name']}/seed-{config['seed']}"


def pairs_of(matrix, shard):
    return [(c.name, s) for c, s in shard_pairs(matrix, shard)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_shards_of_a_7_x_3_matrix_partition_its_pairs_exactly(n):
    m = parse_matrix(RAW)
    everything = [(c.name, s) for c, s in expand(m)]
    assert len(m.cells) == 7 and len(everything) == 21
    parts = [pairs_of(m, Shard(index=k, total=n)) for k in range(1, n + 1)]
    joined = [p for part in parts for p in part]
    assert sorted(joined) == sorted(everything) and len(set(joined)) == 21  # each pair once
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    for part in parts:  # a shard runs its pairs in the matrix's order
        assert part == [p for p in everything if p in part]
    # the same pairs whatever order the cells are listed in (YAML or dict order)
    shuffled = replace(m, cells=tuple(reversed(m.cells)))
    assert [sorted(pairs_of(shuffled, Shard(index=k, total=n))) for k in range(1, n + 1)] == \
        [sorted(p) for p in parts]


def test_more_shards_than_pairs_leaves_some_empty():
    m = parse_matrix({**RAW, "test_count": 1})
    parts = [pairs_of(m, Shard(index=k, total=9)) for k in range(1, 10)]
    assert [len(p) for p in parts] == [1] * 7 + [0, 0]


@pytest.mark.parametrize("text, env, shard", [
    ("2/4", {}, (2, 4)),
    (" 1 / 1 ", {}, (1, 1)),
    (None, {}, (1, 1)),
    ("auto", {"CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "5"}, (3, 5)),  # GitLab CI parallel: 1-based
    ("auto", {"CI_NODE_TOTAL": "1"}, (1, 1)),  # GitLab without parallel:
    ("auto", {"JOB_COMPLETION_INDEX": "0", "LOGQUAKE_SHARD_TOTAL": "4"}, (1, 4)),  # Kubernetes: 0-based
    ("auto", {"JOB_COMPLETION_INDEX": "3", "LOGQUAKE_SHARD_TOTAL": "4"}, (4, 4)),
])
def test_shard_flag(text, env, shard):
    s = parse_shard(text, env)
    assert (s.index, s.total) == shard


@pytest.mark.parametrize("text, env, key", [
    ("0/4", {}, "--shard"),
    ("5/4", {}, "--shard"),
    ("two/4", {}, "--shard"),
    ("auto", {}, "--shard"),
    ("auto", {"CI_NODE_INDEX": "2"}, "CI_NODE_TOTAL"),
    ("auto", {"CI_NODE_INDEX": "x", "CI_NODE_TOTAL": "3"}, "CI_NODE_INDEX"),
    ("auto", {"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "3"}, "CI_NODE_INDEX"),
    ("auto", {"JOB_COMPLETION_INDEX": "1"}, "LOGQUAKE_SHARD_TOTAL"),
    ("auto", {"JOB_COMPLETION_INDEX": "4", "LOGQUAKE_SHARD_TOTAL": "4"}, "JOB_COMPLETION_INDEX"),
])
def test_bad_shards_name_the_flag_or_variable(text, env, key):
    with pytest.raises(ConfigError) as e:
        parse_shard(text, env)
    assert e.value.key == key


def _normalised(index):
    """An index without what differs between machines and moments: start, durations, merge sources."""
    out = {k: v for k, v in index.items() if k not in ("started", "merged", "missing_shards")}
    out["runs"] = [{k: v for k, v in r.items() if k != "duration"} for r in index["runs"]]
    return out


def test_merging_the_shards_gives_the_unsharded_index(tmp_path):
    m = parse_matrix(RAW)
    run_matrix(m, tmp_path / "whole", run=fake_run)
    whole = json.loads((tmp_path / "whole" / "index.json").read_text())
    for k in (1, 2, 3):
        run_matrix(m, tmp_path / f"shard-{k}" / "test-all" / "t", run=fake_run, shard=Shard(index=k, total=3))
    data, runs = merge_shards([tmp_path / "shard-3", tmp_path / "shard-1", tmp_path / "shard-2"], tmp_path / "merged")
    merged = json.loads((tmp_path / "merged" / "index.json").read_text())
    assert merged == json.loads(json.dumps(data, default=str))
    assert _normalised(merged) == _normalised(whole)
    assert merged["exit_code"] == 1 and merged["done"] is True and [s["shard"] for s in merged["merged"]] == [1, 2, 3]
    cases = ET.parse(tmp_path / "merged" / "junit.xml").getroot()
    whole_cases = ET.parse(tmp_path / "whole" / "junit.xml").getroot()
    assert [(c.get("classname"), c.get("name")) for c in cases] == \
        [(c.get("classname"), c.get("name")) for c in whole_cases]
    assert cases.get("failures") == whole_cases.get("failures") == "3"  # the txn cells on seed 11
    # a merged index merges again to itself (it is the whole matrix, shard 1/1)
    merge_shards([tmp_path / "merged"], tmp_path / "again")
    assert _normalised(json.loads((tmp_path / "again" / "index.json").read_text())) == _normalised(merged)


def test_shards_of_different_matrices_are_refused(tmp_path):
    m = parse_matrix(RAW)
    other = parse_matrix(RAW, time_limit=30)
    assert fingerprint(m) != fingerprint(other) and fingerprint(m) == fingerprint(parse_matrix(RAW))
    run_matrix(m, tmp_path / "a", run=fake_run, shard=Shard(index=1, total=2))
    run_matrix(other, tmp_path / "b", run=fake_run, shard=Shard(index=2, total=2))
    with pytest.raises(UserError, match="shards of different matrices"):
        merge_shards([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    # --only makes another matrix too
    run_matrix(select(m, ["safe/queue"]), tmp_path / "c", run=fake_run, shard=Shard(index=2, total=2))
    with pytest.raises(UserError, match="shards of different matrices"):
        merge_shards([tmp_path / "a", tmp_path / "c"], tmp_path / "out")
    # so does another N, and a shard given twice
    run_matrix(m, tmp_path / "d", run=fake_run, shard=Shard(index=2, total=3))
    with pytest.raises(UserError, match="one of 2 shards"):
        merge_shards([tmp_path / "a", tmp_path / "d"], tmp_path / "out")
    run_matrix(m, tmp_path / "e", run=fake_run, shard=Shard(index=1, total=2))
    with pytest.raises(UserError, match="given twice"):
        merge_shards([tmp_path / "a", tmp_path / "e"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_missing_shard_is_an_error_never_a_pass(tmp_path):
    m = parse_matrix({**RAW, "safe": {"workloads": {"queue": {}}, "nemeses": ["none"]}, "unsafe": []})
    run_matrix(m, tmp_path / "a", run=fake_run, shard=Shard(index=1, total=2))
    data, runs = merge_shards([tmp_path / "a"], tmp_path / "out")
    missing = {s for _, s in shard_pairs(m, Shard(index=2, total=2))}
    assert [(r.seed, r.outcome) for r in runs if r.outcome == "error"] == [(s, "error") for s in sorted(missing)]
    assert all("shard 2/2 gave no index.json" in r.message for r in runs if r.outcome == "error")
    assert data["exit_code"] == 2 and data["done"] is False and data["missing_shards"] == [2]


def test_only_selects_cells_by_name_part():
    m = parse_matrix(RAW)
    assert [c.name for c in select(m, ["safe/txn"]).cells] == ["safe/txn/none", "safe/txn/kill",
                                                                 "safe/txn/partition:leader"]
    assert [c.name for c in select(m, ["partition:leader"]).cells] == [
        "safe/queue/partition:leader", "safe/txn/partition:leader", "unsafe/ack-early/partition:leader"]
    assert [c.name for c in select(m, ["leader"]).cells] == [c.name for c in select(m, ["partition:leader"]).cells]
    assert [c.name for c in select(m, ["safe/queue/kill$", "ack-early"]).cells] == [
        "safe/queue/kill", "unsafe/ack-early/partition:leader"]
    assert not matches("unsafe/txn_markers-partial/kill", ["safe/txn"])
    with pytest.raises(ConfigError) as e:
        select(m, ["nothing"])
    assert e.value.key == "--only"


def test_the_tables_keep_every_cell_name_whole_at_120_columns():
    from logquake.matrix.verdicts import summarize
    from logquake.matrix_display import _summary_table, _table

    m = load_matrix(None, guarantees=list(PROFILES))
    bad = {"valid": False, "bad_error_types": ["inconsistent-offsets", "lost-write"], "anomalies": {}}
    runs = [judge(c, 1, bad) for c in m.cells]
    console = Console(width=120, record=True, force_terminal=False)
    console.print(_table(runs, "", len(runs)))
    console.print(_summary_table(summarize(runs)))
    text = console.export_text()
    assert "…" not in text
    lines = text.splitlines()
    for c in m.cells:
        assert sum(f" {c.name} " in line for line in lines) == 2, c.name  # whole, on one line, in both tables


def _logquake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logquake", *args], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "COLUMNS": "120"})


def test_cli_merge_joins_shards_into_one_table_and_exit_code(tmp_path):
    m = parse_matrix(RAW)
    for k in (1, 2):
        run_matrix(m, tmp_path / f"shard-{k}" / "results" / "test-all" / f"t-shard-{k}-of-2", run=fake_run,
                   shard=Shard(index=k, total=2))
    p = _logquake("test-all", "merge", str(tmp_path / "shard-1"), str(tmp_path / "shard-2"),
                  "--results-dir", str(tmp_path / "results"))
    assert p.returncode == 1, p.stdout + p.stderr  # the txn cells' fails
    [out] = (tmp_path / "results" / "test-all").iterdir()
    assert out.name.endswith("-merged") and not set(out.name) & set(':*?"<>|\\')
    assert len(json.loads((out / "index.json").read_text())["runs"]) == 21
    assert "shard 1: 11 runs" in p.stdout and "shard 2: 10 runs" in p.stdout
    assert "unsafe/ack-early/partition:leader" in p.stdout and f"index: {out / 'index.json'}" in p.stdout
    # another matrix's shard: one red line and its hint, exit 3, nothing written
    run_matrix(parse_matrix(RAW, test_count=1), tmp_path / "other", run=fake_run, shard=Shard(index=2, total=2))
    p = _logquake("test-all", "merge", str(tmp_path / "shard-1"), str(tmp_path / "other"), "--out",
                  str(tmp_path / "refused"))
    assert p.returncode == 3 and "shards of different matrices" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "refused").exists()


def test_cli_rejects_bad_shard_and_only_flags_without_running_anything(tmp_path):
    for args, key in ((["--shard", "3/2"], "--shard"), (["--only", "nothing"], "--only"),
                      (["--shard", "auto"], "--shard")):
        p = _logquake("test-all", *args, "--results-dir", str(tmp_path / "r"))
        assert p.returncode == 3 and f"ConfigError: {key}" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()

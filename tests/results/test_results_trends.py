"""`logquake serve`'s trends over nights: the tests table, a page per test name, runs told apart."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from results_fixtures import invalid_ops, make_run_dir, valid_ops

from logquake.results.serve import index_page, ops_per_s, scan_runs, trend_page, trends


def night(root: Path, name: str, start: str, results, *, seed: int = 42, ops=None, **test) -> Path:
    run = make_run_dir(root, valid_ops() if ops is None else ops, results, name=name, start=start, seed=seed)
    if test:
        t = json.loads((run / "test.json").read_text())
        (run / "test.json").write_text(json.dumps({**t, **test}))
    return run


VALID = {"valid": True, "bad_error_types": [], "anomalies": {}}
INVALID = {"valid": False, "bad_error_types": ["lost-write", "G1a"], "anomalies": {}}


def three_nights(root: Path) -> list[Path]:
    """valid, invalid, valid: the test `queue` over three nights."""
    return [night(root, "queue", "20261128T031700.000Z", VALID, seed=1),
            night(root, "queue", "20261129T031700.000Z", INVALID, seed=2, ops=invalid_ops()),
            night(root, "queue", "20261130T031700.000Z", VALID, seed=3)]


def test_the_front_page_lists_tests_with_their_latest_verdict_and_when_it_changed(tmp_path):
    three_nights(tmp_path)
    night(tmp_path, "txn", "20261128T031700.000Z", VALID)
    night(tmp_path, "txn", "20261130T031700.000Z", VALID)
    night(tmp_path, "pipeline", "20261129T031700.000Z", INVALID)
    [p, q, t] = trends(scan_runs(tmp_path))  # by name
    assert (q.name, q.latest, q.before, q.since.started_text) == ("queue", "valid", "invalid", "2026-11-30 03:17:00 UTC")
    assert (t.latest, t.before, t.since.started_text) == ("valid", "", "2026-11-28 03:17:00 UTC")  # never changed
    assert p.latest == "invalid"
    page = index_page(tmp_path).decode()
    tests = re.findall(r'<tr class="test" data-latest="([^"]+)"><td><a href="([^"]+)">([^<]+)</a>.*?</tr>', page, re.S)
    assert tests == [("invalid", "/?trend=pipeline", "pipeline"), ("valid", "/?trend=queue", "queue"),
                     ("valid", "/?trend=txn", "txn")]
    row = re.search(r'<tr class="test" data-latest="valid"><td><a href="/\?trend=queue">.*?</tr>', page, re.S).group(0)
    assert "2026-11-30 03:17:00 UTC (was invalid)" in row
    assert "never" in re.search(r'<tr class="test"[^>]*><td><a href="/\?trend=txn">.*?</tr>', page, re.S).group(0)


def test_the_index_tells_runs_apart_by_nemesis_client_txn_and_seed(tmp_path):
    night(tmp_path, "queue", "20261128T031700.000Z", VALID, seed=7, nemesis=["partition:leader"], client="confluent",
          txn=False)
    night(tmp_path, "queue", "20261128T041700.000Z", VALID, seed=8, nemesis=[], client="kafka-python", txn=True)
    page = index_page(tmp_path).decode()
    assert "<th>nemesis</th><th>client</th><th>txn</th><th>seed</th>" in page
    rows = re.findall(r'<tr class="run".*?</tr>', page, re.S)
    assert '<td>none</td><td>kafka-python</td><td>txn</td><td class="num">8</td>' in rows[0]
    assert '<td>partition:leader</td><td>confluent</td><td></td><td class="num">7</td>' in rows[1]


def test_the_trend_page_marks_each_run_in_time_order_with_ops_anomalies_nemesis_seed_and_report(tmp_path):
    runs = three_nights(tmp_path)
    (runs[0] / "report.html").write_text("<html>report</html>")
    status, body = trend_page(tmp_path, "queue")
    page = body.decode()
    assert status == 200
    marks = re.findall(r'<a href="([^"]+)"><circle class="mark" data-status="([^"]+)" data-run="([^"]+)" '
                       r'cx="([\d.]+)"', page)
    assert [m[1] for m in marks] == ["valid", "invalid", "valid"]
    assert [m[2] for m in marks] == [r.relative_to(tmp_path).as_posix() for r in runs]
    xs = [float(m[3]) for m in marks]
    assert xs == sorted(xs) and len(set(xs)) == 3
    assert marks[0][0] == "/queue/20261128T031700.000Z/report.html"  # a report where there is one
    assert marks[1][0] == "/queue/20261129T031700.000Z/"
    rows = re.findall(r'<tr class="trend-run" data-status="([^"]+)">(.*?)</tr>', page, re.S)
    assert [r[0] for r in rows] == ["valid", "invalid", "valid"]  # the table: newest first
    assert "lost-write, G1a" in rows[1][1] and "partition,kill" in rows[1][1] and '<td class="num">2</td>' in rows[1][1]
    # ops/s of the main phase from the history: the valid history has 3 ok ops in 60 s
    rate = ops_per_s(runs[0], 60.0)
    assert rate == 3 / 60 and f'<td class="num">{rate:.1f}</td>' in rows[2][1]
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "<script" not in page
    assert trend_page(tmp_path, "nope")[0] == 404


def test_a_corrupt_results_json_is_an_unreadable_run_not_a_failed_page(tmp_path):
    three_nights(tmp_path)
    torn = night(tmp_path, "queue", "20261201T031700.000Z", None)
    (torn / "results.json").write_text('{"valid": tr')
    odd = night(tmp_path, "queue", "20261202T031700.000Z", None)
    (odd / "results.json").write_text('[1, 2]')
    shapes = night(tmp_path, "queue", "20261203T031700.000Z", {"valid": False, "bad_error_types": 5})
    (shapes / "test.json").write_text('{"name": "queue", "time_limit": "soon", "nemesis": {"x": 1}, "seed": null}')
    (shapes / "history.jsonl").write_text('{"index": 0, "time": "x"}\nnot json\n')
    status, body = trend_page(tmp_path, "queue")
    page = body.decode()
    assert status == 200
    assert re.findall(r'class="mark" data-status="([^"]+)"', page) == ["valid", "invalid", "valid", "unreadable",
                                                                        "unreadable", "invalid"]
    assert "results.json is unreadable" in page and "results.json is not an object" in page
    [t] = trends(scan_runs(tmp_path))
    assert t.latest == "invalid" and t.before == "valid"  # unreadable runs have no verdict to follow
    assert b"unreadable" in index_page(tmp_path)


def test_trends_work_over_merged_test_all_results(tmp_path):
    """The shards' artifacts of two nights downloaded side by side: runs found deeper down,
    one trend per test name across shards and nights, index.json directories not runs."""
    for day, verdict in (("20261128", VALID), ("20261129", INVALID)):
        for shard in (1, 2):
            base = tmp_path / f"night-{day}" / f"shard-{shard}" / "results"
            night(base, f"safe-queue-{shard}", f"{day}T031700.000Z", verdict)
            (base / "test-all" / f"{day}T031700Z-shard-{shard}-of-2").mkdir(parents=True)
            (base / "test-all" / f"{day}T031700Z-shard-{shard}-of-2" / "index.json").write_text("{}")
    runs = scan_runs(tmp_path)
    assert len(runs) == 4
    ts = trends(runs)
    assert [(t.name, [r.status for r in t.runs]) for t in ts] == [("safe-queue-1", ["valid", "invalid"]),
                                                                  ("safe-queue-2", ["valid", "invalid"])]
    status, body = trend_page(tmp_path, "safe-queue-2")
    assert status == 200 and body.decode().count('class="mark"') == 2


def test_cli_serve_refuses_a_results_dir_that_does_not_exist(tmp_path):
    for missing in (tmp_path / "nonexistent", tmp_path / "file"):
        if missing.name == "file":
            missing.write_text("x")
        p = subprocess.run([sys.executable, "-m", "logquake", "serve", "--port", "0", "--results", str(missing)],
                           capture_output=True, text=True, timeout=120, check=False,
                           env={**os.environ, "COLUMNS": "300"})  # one line, unwrapped
        assert p.returncode == 3, p.stdout + p.stderr
        assert p.stderr.strip().count("\n") == 0 and "--results" in p.stderr and str(missing) in p.stderr
        assert "Traceback" not in p.stderr and p.stdout == ""

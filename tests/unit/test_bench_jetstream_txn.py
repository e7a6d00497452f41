"""benchmarks/bench_jetstream_txn.py: what it counts from a history, and the rows it writes."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from logquake.history import FAIL, INFO, OK, HistoryWriter, Op
from logquake.workloads.client import complete

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports bench_harness and bench_jetstream
    try:
        spec = importlib.util.spec_from_file_location("bench_jetstream_txn", ROOT / "benchmarks" / "bench_jetstream_txn.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _pair(w: HistoryWriter, process: int, start: int, end: int, f: str, value, type_: str, done_value=None,
          **extra) -> None:
    inv = Op(process=process, type="invoke", f=f, value=value, extra=extra, time=start)
    w.write(inv)
    w.write(replace(complete(inv, type_, value if done_value is None else done_value), time=end))


def test_tally_counts_commits_their_messages_and_kinds_inside_the_window(bench, tmp_path):
    ms = 1_000_000
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        _pair(w, 0, 0, 5 * ms, "assign", [1, 2], OK)
        # Before the window: not counted.
        _pair(w, 1, 1 * ms, 8 * ms, "send", [["send", 1, 1]], OK, [["send", 1, [1, 1]]])
        # Inside [10, 100] ms: two commits (3 + 1 messages), one deliberate abort, one failed,
        # one info, a poll, a crash.
        _pair(w, 0, 9 * ms, 20 * ms, "send", [["send", 1, 2], ["send", 1, 3], ["send", 1, 4]], OK,
              [["send", 1, [2, 2]], ["send", 1, [3, 3]], ["send", 1, [4, 4]]])
        _pair(w, 1, 10 * ms, 30 * ms, "send", [["send", 2, 1]], OK, [["send", 2, [1, 1]]])
        _pair(w, 2, 10 * ms, 40 * ms, "send", [["send", 2, 2]], FAIL, abort=True)
        _pair(w, 3, 10 * ms, 50 * ms, "send", [["send", 2, 3]], FAIL)
        _pair(w, 4, 10 * ms, 60 * ms, "send", [["send", 2, 4]], INFO)
        _pair(w, 5, 10 * ms, 70 * ms, "poll", [["poll"]], OK, [["poll", {"1": [[1, 1]]}]])
        _pair(w, 6, 10 * ms, 80 * ms, "crash", None, INFO)
        # After it: not counted.
        _pair(w, 0, 90 * ms, 101 * ms, "send", [["send", 1, 5]], OK, [["send", 1, [5, 5]]])
    t = bench.tally(path, 10 * ms, 100 * ms)
    assert t["commits"] == 2 and t["messages"] == 4
    assert {k: len(v) for k, v in t["lat_ms"].items()} == {"commit": 2, "abort": 1, "failed": 1, "info": 1,
                                                           "poll": 1, "other": 1}
    assert t["lat_ms"]["commit"] == pytest.approx([11.0, 20.0])


def _side(rate: float) -> dict:
    return {"rate": rate, "msg_rate": 2.5 * rate, "p50_ms": 10.0, "poll_p50_ms": 2.0, "poll_share": 0.2, "cpu_harness_ms": 1.0, "cpu_servers_ms": 2.0}


@pytest.mark.parametrize(("js_rate", "met"), [(60.0, True), (40.0, False)])
def test_rows_hold_the_ratio_against_the_target(bench, js_rate, met):
    ratios = [js_rate / 100, js_rate / 100]
    rows = bench.rows_for({"workers": 10, "rounds": 2, "ratios": ratios, "ratio": js_rate / 100,
                           "kafka": _side(100.0), "jetstream": _side(js_rate)})
    head = rows[0]
    assert head["benchmark"] == "jetstream-txn" and head["unit"] == "txn/s" and head["value"] == js_rate
    assert head["ratio"] == pytest.approx(js_rate / 100) and head["met"] is met
    assert head["target"] == ">= 0.5x broker" and "broker transactions 100.0 txn/s" in head["reference"]
    assert rows[1]["ratio"] == pytest.approx(js_rate / 100)  # the messages inside them


def test_run_all_takes_its_rows_from_the_rows_file():
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = run_all  # dataclasses look their module up by name
    spec.loader.exec_module(run_all)
    data = Path(__file__).resolve().parent / "data" / "bench"
    b = next(b for b in run_all.BENCHES if b.name == "jetstream-txn")
    assert b.parse is None and b.script == "bench_jetstream_txn.py"
    rows = run_all.read_rows(b, (data / "jetstream-txn.out").read_text(), data / "jetstream-txn.rows.json")
    head = rows[0]
    assert head["benchmark"] == "jetstream-txn" and head["met"] is True
    assert head["ratio"] == pytest.approx(0.7248677, rel=1e-6) and head["value"] == 69.4
    assert "0.72x" in (data / "jetstream-txn.out").read_text()  # the printed figure matches the row's

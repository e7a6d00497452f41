"""benchmarks/run_all.py: its parsers on real benchmark output, its table, its failure rows, a quick run.

The parser tests read output captured from the benchmark scripts themselves
(tests/unit/data/bench/README.md says when and how), so a script whose printed format drifts
from its parser shows here as a missing figure. The smoke test runs run_all.py for real on
the two quickest benchmarks.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "bench"


def _load_run_all():
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


run_all = _load_run_all()


def sample(name: str) -> str:
    return (DATA / f"{name}.out").read_text()


def by_metric(rows: list[dict]) -> dict[str, dict]:
    return {r["metric"]: r for r in rows}


def test_every_row_has_the_table_columns_and_every_parser_finds_figures():
    for b in run_all.BENCHES:
        if b.parse is None:
            continue
        rows = b.parse(sample(b.name))
        assert rows, f"{b.name}: no figures found in its captured output"
        for r in rows:
            assert set(r) == set(run_all.COLUMNS) and r["benchmark"] == b.name
            assert isinstance(r["value"], float | int), r
        assert b.parse("") == [] and b.parse("Traceback (most recent call last):\n  boom\n") == []


def test_every_benchmark_names_a_script_that_exists_and_a_sample_here():
    for b in run_all.BENCHES:
        assert (ROOT / "benchmarks" / b.script).is_file(), b.script
        assert (DATA / f"{b.name}.out").is_file(), f"no captured output of {b.script} in {DATA}"


def test_broker_rows():
    rows = by_metric(run_all.parse_broker(sample("broker")))
    ready = rows["3-node cluster ready (first acks=all write)"]
    assert (ready["value"], ready["ratio"], ready["met"]) == (3.41, pytest.approx(3.41 / 1.22), False)
    assert ready["reference"] == "python import floor 1.22 s"
    tput = rows["1 KiB acks=all RF3 3 nodes, fsync always"]
    assert (tput["value"], tput["unit"], tput["met"]) == (12820.0, "msg/s", False)
    disk = rows["same, against the disk's fdatasync ceiling / 3"]
    assert disk["ratio"] == pytest.approx(12820 / 18361) and "54 MiB/s" in disk["reference"]
    assert rows["1 KiB acks=all RF3 3 nodes, fsync never"]["ratio"] == pytest.approx(23287 / 12820)
    assert rows["RF3 acks=all vs 1 node acks=1"]["ratio"] == pytest.approx(12820 / 58882)
    assert len(rows) == 5


def test_broker_latency_rows_when_the_script_prints_them():
    assert not any("latency" in r["metric"] or "p99" in r["metric"] for r in run_all.parse_broker(sample("broker")))
    rows = by_metric(run_all.parse_broker(sample("broker-latency")))
    ack = rows["acks=all produce->ack p50, one write in flight (fsync always)"]
    assert (ack["value"], ack["target"], ack["met"]) == (27.5, "< 5 ms", False)
    assert ack["reference"] == "loopback round trip p50 0.08 ms" and ack["ratio"] == pytest.approx(27.5 / 0.08)
    assert rows["same, p99"]["value"] == 92.1 and rows["produce->consumer p50 (same writes)"]["value"] == 29.1
    assert rows["1 KiB acks=all RF3 3 nodes, fsync always"]["value"] == 9413  # the other figures still found
    assert len(rows) == 8


def test_jetstream_rows_come_from_its_rows_file(tmp_path):
    bench = next(b for b in run_all.BENCHES if b.name == "jetstream")
    rows = run_all.read_rows(bench, sample("jetstream"), DATA / "jetstream.rows.json")
    assert len(rows) == 11 and all(set(r) == set(run_all.COLUMNS) for r in rows)
    got = by_metric(rows)
    both = got["broker / JetStream msg/s, both fsyncing every write (librdkafka (C) vs nats-py (pure Python))"]
    assert both["value"] == 60626 and both["reference"] == "JetStream R3 file, sync_interval always 11,741 msg/s"
    default = got["broker / JetStream msg/s, each at its default durability (librdkafka (C) vs nats-py (pure Python))"]
    assert default["reference"] == "JetStream R3 file, sync_interval default 12,096 msg/s"
    harness = got["harness ops/s against JetStream, 10 workers, 3 nodes, full history"]
    assert (harness["value"], harness["target"], harness["met"]) == (220.1, ">= 0.8x raw", False)
    up = got["5-node JetStream up (lab, routed, stream created, first ack)"]
    assert (up["target"], up["met"], up["reference"]) == ("<= 2.0x broker", True, "broker 5-node up 1.75 s")
    # the printed summary agrees with the rows the script wrote
    out = sample("jetstream")
    assert "broker / JetStream, default durability: 5.01x msg/s" in out and round(default["ratio"], 2) == 5.01
    assert "broker / JetStream, both fsync always:  5.16x msg/s" in out and round(both["ratio"], 2) == 5.16
    assert "= 0.72x" in out and round(harness["ratio"], 2) == 0.72
    assert "= 0.44x" in out and round(up["ratio"], 2) == 0.44
    missing = run_all.read_rows(bench, "", tmp_path / "none.json")
    assert missing[0]["value"] is None and "no rows file" in missing[0]["reference"]
    (tmp_path / "odd.json").write_text('{"metric": 1}')
    odd = run_all.read_rows(bench, "", tmp_path / "odd.json")
    assert odd[0]["metric"] == "run" and "not a list of rows" in odd[0]["reference"]


def test_bench_jetstream_reports_a_failed_bring_up_as_a_row(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # bench_jetstream imports bench_harness
    spec = importlib.util.spec_from_file_location("bench_jetstream", ROOT / "benchmarks" / "bench_jetstream.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.rows_for({"harness": {"raw": 100.0, "harness": 85.0, "workers": 10},
                           "errors": {"bring-up": "PermissionError: the lab needs root"}})
    assert [r["metric"] for r in rows] == ["harness ops/s against JetStream, 10 workers, 3 nodes, full history",
                                           "bring-up"]
    assert rows[0]["met"] is True and rows[0]["ratio"] == pytest.approx(0.85)
    assert rows[1]["value"] is None and rows[1]["reference"] == "error: PermissionError: the lab needs root"


def test_lab_rows():
    rows = by_metric(run_all.parse_lab(sample("lab")))
    up = rows["5-node cluster up (lab + brokers + first acks=all write)"]
    assert up["value"] == pytest.approx(4.16821699799948) and up["met"] is True
    assert up["reference"] == "5 parallel python starts 0.32 s"
    part = rows["partition applied on every node"]
    assert part["value"] == pytest.approx(73.60164200144936) and part["unit"] == "ms" and part["met"] is True
    assert len(rows) == 5


def test_harness_rows_flag_a_negative_overhead_as_noise():
    loaded = by_metric(run_all.parse_harness(sample("harness")))
    ops = loaded["ops/s, 20 workers, 3 nodes, full history"]
    assert (ops["value"], ops["ratio"]) == (183.2, pytest.approx(183.2 / 165.4))
    assert ops["reference"] == "raw client calls 165.4 ops/s"
    assert ops["target"] == ">= 2,000" and ops["met"] is False
    over = loaded["overhead per op (process time)"]
    assert over["value"] == -587.4 and "noise" in over["reference"]
    quiet = by_metric(run_all.parse_harness(sample("harness-quiet")))
    assert quiet["overhead per op (process time)"]["value"] == 853.9
    assert quiet["overhead per op (process time)"]["reference"] is None


def test_checker_rows():
    rows = by_metric(run_all.parse_checker(sample("checker")))
    check = rows["queue check, 100,254-op history (CPU)"]
    assert check["value"] == 5.95 and check["ratio"] == pytest.approx(5.95 / 1.14)
    assert rows["queue check ops/s (one core)"]["value"] == 16840 and rows["queue check ops/s (one core)"]["met"] is False
    assert rows["peak RSS, 100,254-op history"]["value"] == 343
    g1c = rows["G1c cycle search, 20,258 ops"]
    assert g1c["value"] == 1.23 and g1c["met"] is True and g1c["reference"] == "planted cycle found: True"
    unfound = sample("checker").replace("planted G1c found                                True",
                                        "planted G1c found                                False")
    assert by_metric(run_all.parse_checker(unfound))["G1c cycle search, 20,258 ops"]["met"] is False


def test_linear_rows_with_and_without_porcupine():
    [alone] = run_all.parse_linear(sample("linear"))
    assert alone["metric"] == "cas-register histories (4 simulated)" and alone["value"] == 0.138
    assert "LOGQUAKE_PORCUPINE not set" in alone["reference"] and alone["ratio"] is None
    [both] = run_all.parse_linear(sample("linear-porcupine"))
    assert both["metric"] == "cas-register histories (4 simulated, 102 imported)"
    assert (both["value"], both["ratio"], both["reference"]) == (0.28, 0.47, "Porcupine 0.599 s")


def test_raft_rows():
    rows = run_all.parse_raft(sample("raft"))
    refs = [r["reference"] for r in rows if r["metric"] == "in-process Raft, 16 records/entry"]
    assert refs == ["bytes copy 17,324,042 records/s", "codec alone 2,095,607 records/s"]
    m = by_metric(rows)
    assert m["in-process Raft, 1 record/entry"]["value"] == 53902
    assert m["SegmentLog append, fsync always"]["ratio"] == pytest.approx(5473 / 565252)
    assert m["random simulation schedules"]["reference"] == "0 of 20 with violations"


def test_report_rows():
    rows = by_metric(run_all.parse_report(sample("report")))
    t = rows["report.html for 100,024 ops"]
    assert t["value"] == 9.88 and t["ratio"] == pytest.approx(9.88 / 3.37) and t["met"] is True
    assert rows["report.html size"]["value"] == 5.7 and rows["report peak RSS"]["value"] == 85


def test_markdown_and_json_tables_of_the_captured_rows():
    rows = [r for b in run_all.BENCHES if b.parse for r in b.parse(sample(b.name))]
    rows.append(run_all.row("lab", "run", None, reference="exit 1: a | b"))
    meta = {"date": "2026-11-29 18:25 UTC", "quick": True, "commit": "e85abd6", "nproc": 2, "mem_gib": 23.5,
            "python": "3.11.7", "load_before": (2.7, 1.1, 1.5), "load_after": (10.9, 6.2, 3.4), "seconds": 185.2,
            "durations_s": {"broker": 26.0, "lab": 38.0}}
    md = run_all.markdown(meta, rows)
    head, table = md.split("\n\n", 1)
    assert head.startswith("Measured 2026-11-29 18:25 UTC (quick sizes), commit e85abd6, 2 CPUs")
    assert "load average 2.7/1.1/1.5 before, 10.9/6.2/3.4 after; 185 s in all (broker 26 s, lab 38 s)" in head
    lines = table.strip().splitlines()
    assert lines[0] == "| " + " | ".join(run_all.COLUMNS) + " |" and len(lines) == 2 + len(rows)
    assert all(line.count("|") == len(run_all.COLUMNS) + 1 for line in lines)  # a | in a value is escaped
    assert "| broker | 1 KiB acks=all RF3 3 nodes, fsync always | 12,820 | msg/s | - | - | >= 50,000 | NO |" in lines
    assert lines[-1] == "| lab | run | - |  | exit 1: a / b | - | - | - |"
    assert json.loads(json.dumps({"meta": meta, "rows": rows}))["rows"] == rows
    assert "probe" not in head  # a table from before machine_probe.py


def test_markdown_head_names_the_machine_probe_before_and_after():
    meta = {"date": "2026-12-01 20:50 UTC", "quick": False, "commit": "a566ef1", "nproc": 2, "mem_gib": 23.5,
            "python": "3.11.7", "load_before": (0.1, 0.2, 0.3), "load_after": (3.0, 2.0, 1.0), "seconds": 130.0,
            "durations_s": {"checker": 22.0},
            "probe_before": {"python_mops": 21.37, "objects_mops": 2.4501, "fresh_memory_mb_s": 1533.9,
                             "fdatasync_ms": 0.2044},
            "probe_after": None}
    head = run_all.markdown(meta, []).split("\n\n", 1)[0]
    assert head.endswith("Machine probe before: python loop 21.4 M/s, objects 2.45 M/s, fresh memory 1,534 MB/s,"
                         " fdatasync 0.20 ms; after: probe failed.")


def test_machine_probe_measures_all_four_figures():
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "machine_probe.py"), "--json", "--seconds", "0.3"],
                       capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(p.stdout)
    assert set(got) == {"python_mops", "objects_mops", "fresh_memory_mb_s", "fdatasync_ms"}
    assert all(isinstance(v, float) and v > 0 for v in got.values()), got
    assert run_all.machine_probe(0.3).keys() == got.keys()
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "machine_probe.py"), "--seconds", "0"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--seconds must be positive, got 0" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("value, text", [(None, "-"), (True, "yes"), (False, "NO"), (12820.0, "12,820"),
                                         (5.649, "5.65"), (85.0, "85.0"), (0.00968, "0.00968"), (343, "343")])
def test_number_format(value, text):
    assert run_all.fmt(value) == text


SCRIPTS = {
    "fails": "import sys\nprint('half a figure')\nsys.exit('no broker could start')\n",
    "silent": "print('nothing this parser knows')\n",
    "hangs": "import time\nprint('started', flush=True)\ntime.sleep(60)\n",
    "trips": "print('ready: 1.0 s to first write; import floor 0.5 s')\n",
    "norows": "print('forgot to write --json')\n",
}


def test_each_way_a_script_can_go_wrong_is_one_row_with_the_reason(tmp_path):
    def bench(name: str, parse=run_all.parse_broker):
        script = tmp_path / f"{name}.py"
        script.write_text(SCRIPTS[name])
        return run_all.Bench(name=name, script=str(script), full=(), quick=(), parse=parse)

    def boom(out: str):
        raise KeyError("partition_s")

    logs = tmp_path / "logs"
    logs.mkdir()
    got = {
        "fails": run_all.run_one(bench("fails"), True, logs, 60),
        "silent": run_all.run_one(bench("silent"), True, logs, 60),
        "hangs": run_all.run_one(bench("hangs"), True, logs, 3),
        "trips": run_all.run_one(bench("trips", boom), True, logs, 60),
        "norows": run_all.run_one(bench("norows", None), True, logs, 60),
    }
    for name, rows in got.items():
        assert len(rows) == 1 and rows[0]["metric"] == "run" and rows[0]["value"] is None, (name, rows)
    assert got["fails"][0]["reference"] == "exit 1: no broker could start"
    assert got["silent"][0]["reference"] == "no figures found in its output"
    assert got["hangs"][0]["reference"] == "timed out after 3 s"
    assert got["trips"][0]["reference"] == "parser failed: KeyError: 'partition_s'"
    assert got["norows"][0]["reference"].startswith("no rows file from --json")
    assert "half a figure" in (logs / "fails.log").read_text()
    assert "started" in (logs / "hangs.log").read_text()


def test_quick_run_of_the_two_quickest_benchmarks_end_to_end(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--only", "linear", "raft",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [js] = tmp_path.glob("*.json")
    data = json.loads(js.read_text())
    assert data["meta"]["quick"] is True and set(data["meta"]["durations_s"]) == {"linear", "raft"}
    assert data["meta"]["probe_before"]["python_mops"] > 0 and data["meta"]["probe_after"]["fdatasync_ms"] > 0
    assert {r["benchmark"] for r in data["rows"]} == {"linear", "raft"}
    assert all(r["value"] is not None for r in data["rows"]), data["rows"]
    assert len(data["rows"]) >= 5
    md = js.with_suffix(".md").read_text()
    assert md.count("\n| linear |") == 1 and md.count("\n| raft |") == len(data["rows"]) - 1
    assert {f.name for f in js.with_suffix(".logs").iterdir()} == {"linear.log", "raft.log"}

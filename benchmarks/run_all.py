"""Run every benchmark, each in its own subprocess, and write one table of figures.

    .venv/bin/python benchmarks/run_all.py [--quick] [--only NAME ...] [--out DIR]

Each script prints its figures; the parsers below turn that output into rows
{benchmark, metric, value, unit, reference, ratio, target, met} (bench_jetstream and
bench_jetstream_txn write theirs through --json). A figure a parser cannot find becomes a row
saying so, a script that fails becomes a row with its exit code, so the table always shows
what is missing.
Writes DIR/<UTC date-time>.json and .md (DIR defaults to benchmarks/results/, gitignored),
with the machine (nproc, memory, load average and machine_probe.py's figures before and
after), and prints the table.
`--quick` uses small sizes (a few minutes in all); the full sizes are the issue's.
recall.py is not part of the run (long; run it on its own).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

HERE = Path(__file__).resolve().parent
Row = dict


def row(bench: str, metric: str, value: float | str | None, unit: str = "", *, reference: str | None = None,
        ratio: float | None = None, target: str | None = None, met: bool | None = None) -> Row:
    return {"benchmark": bench, "metric": metric, "value": value, "unit": unit, "reference": reference,
            "ratio": ratio, "target": target, "met": met}


def num(s: str) -> float:
    return float(s.replace(",", ""))


def find(out: str, pattern: str) -> re.Match | None:
    return re.search(pattern, out, re.MULTILINE)


# --- parsers: one per script's printed output -----------------------------------------------------


def parse_broker(out: str) -> list[Row]:
    b, rows = "broker", []
    if m := find(out, r"^ready: ([\d.]+) s .*import floor ([\d.]+) s"):
        ready, floor = num(m[1]), num(m[2])
        rows.append(row(b, "3-node cluster ready (first acks=all write)", ready, "s",
                        reference=f"python import floor {floor:.2f} s", ratio=ready / floor,
                        target="<= 3 s", met=ready <= 3))
    rate = None
    if m := find(out, r"^throughput: ([\d,]+) msg/s.*fsync (\w+)"):
        rate = num(m[1])
        rows.append(row(b, f"1 KiB acks=all RF3 3 nodes, fsync {m[2]}", rate, "msg/s",
                        target=">= 50,000", met=rate >= 50_000))
    if rate and (m := find(out, r"^disk: ([\d.]+) MiB/s .*ceiling ([\d,]+) msg/s")):
        rows.append(row(b, "same, against the disk's fdatasync ceiling / 3", rate, "msg/s",
                        reference=f"ceiling {num(m[2]):,.0f} msg/s ({m[1]} MiB/s)", ratio=rate / num(m[2])))
    if rate and (m := find(out, r"^throughput with fsync never.*?: ([\d,]+) msg/s")):
        rows.append(row(b, "1 KiB acks=all RF3 3 nodes, fsync never", num(m[1]), "msg/s",
                        reference=f"fsync always {rate:,.0f} msg/s", ratio=num(m[1]) / rate))
    if rate and (m := find(out, r"^reference: ([\d,]+) msg/s on 1 node")):
        rows.append(row(b, "RF3 acks=all vs 1 node acks=1", rate, "msg/s",
                        reference=f"1 node acks=1 {num(m[1]):,.0f} msg/s", ratio=rate / num(m[1])))
    return rows + _broker_latency(out)


def _broker_latency(out: str) -> list[Row]:
    """One acks=all write in flight: produce->ack and produce->consumer, against a loopback round trip."""
    b, rows = "broker", []
    m = find(out, r"^latency, one acks=all write in flight \(fsync (\w+).*?produce->ack p50 ([\d.]+) p99 ([\d.]+) ms; "
                  r"produce->consumer p50 ([\d.]+) p99 ([\d.]+) ms")
    if not m:
        return rows
    rtt = find(out, r"^reference: loopback ping-pong between two processes p50 ([\d.]+)")
    ref = dict(reference=f"loopback round trip p50 {num(rtt[1]):.2f} ms", ratio=num(m[2]) / num(rtt[1])) \
        if rtt and num(rtt[1]) > 0 else {}
    rows.append(row(b, f"acks=all produce->ack p50, one write in flight (fsync {m[1]})", num(m[2]), "ms",
                    target="< 5 ms", met=num(m[2]) < 5, **ref))
    rows.append(row(b, "same, p99", num(m[3]), "ms"))
    rows.append(row(b, "produce->consumer p50 (same writes)", num(m[4]), "ms"))
    return rows


def parse_lab(out: str) -> list[Row]:
    b = "lab"
    last = [line for line in out.splitlines() if line.startswith("{")]
    if not last:
        return []
    f = json.loads(last[-1])
    rows = []
    if "cluster_up_s" in f:
        rows.append(row(b, "5-node cluster up (lab + brokers + first acks=all write)", f["cluster_up_s"], "s",
                        reference=f"5 parallel python starts {f['python_start_s']:.2f} s",
                        ratio=f.get("cluster_up_per_python_start"), target="< 5 s", met=f["cluster_up_s"] < 5))
        rows.append(row(b, "5 brokers listening", f["listening_s"], "s",
                        reference=f"5 parallel broker imports {f['broker_cli_start_s']:.2f} s",
                        ratio=f.get("listening_per_broker_cli_start")))
    elif "cluster_up_error" in f:
        rows.append(row(b, "5-node cluster up", None, reference=f"error: {f['cluster_up_error'][:80]}"))
    rows.append(row(b, "lab network up (5 namespaces, no processes)", f["lab_up_s"], "s"))
    rows.append(row(b, "partition applied on every node", f["partition_s"] * 1e3, "ms",
                    reference=f"one nsenter {f['nsenter_s'] * 1e3:.1f} ms", ratio=f["partition_per_nsenter"],
                    target="< 200 ms", met=f["partition_s"] < 0.2))
    rows.append(row(b, "heal on every node", f["heal_s"] * 1e3, "ms"))
    return rows


def parse_harness(out: str) -> list[Row]:
    b = "harness"
    raw, h = find(out, r"^raw client calls:\s+([\d.]+)"), find(out, r"^harness \(with history\):\s+([\d.]+)")
    if not (raw and h):
        return []
    workers = find(out, r"workers=(\d+)")
    nodes = find(out, r"nodes=(\d+)")
    where = f"{workers[1] if workers else '?'} workers, {nodes[1] if nodes else '?'} nodes, full history"
    rows = [row(b, f"ops/s, {where}", num(h[1]), "ops/s",
                reference=f"raw client calls {num(raw[1]):,.1f} ops/s",
                ratio=num(h[1]) / num(raw[1]) if num(raw[1]) else None,
                target=">= 2,000", met=num(h[1]) >= 2000)]
    if m := find(out, r"^overhead per op:\s+([-\d.]+) us"):
        # 1/harness - 1/raw: below zero when the run's noise is larger than the overhead
        rows.append(row(b, "overhead per op (process time)", num(m[1]), "us",
                        reference="negative: within this run's noise" if num(m[1]) < 0 else None))
    return rows


def parse_checker(out: str) -> list[Row]:
    b, rows = "checker", []
    ops = find(out, r"^history ops\s+([\d,]+)")
    ref = find(out, r"^reference: json.loads of every line\s+([\d.]+) s")
    if (m := find(out, r"^check_history\s+([\d.]+) s")) and ops and ref:
        rows.append(row(b, f"queue check, {ops[1]}-op history (CPU)", num(m[1]), "s",
                        reference=f"json.loads of every line {num(ref[1]):.2f} s", ratio=num(m[1]) / num(ref[1])))
    if m := find(out, r"^check ops/s \(one core\)\s+([\d,]+)"):
        rows.append(row(b, "queue check ops/s (one core)", num(m[1]), "ops/s",
                        target=">= 100,000", met=num(m[1]) >= 100_000))
    if m := find(out, r"^peak RSS\s+([\d,]+) MB"):
        rows.append(row(b, f"peak RSS, {ops[1] if ops else '?'}-op history", num(m[1]), "MB",
                        target="< 4096 MB", met=num(m[1]) < 4096))
    if m := find(out, r"^G1c history \(([\d,]+) ops\)\s+check ([\d.]+) s"):
        found = find(out, r"^planted G1c found\s+(\w+)")
        rows.append(row(b, f"G1c cycle search, {m[1]} ops", num(m[2]), "s",
                        reference=f"planted cycle found: {found[1] if found else '?'}",
                        target="< 10 s", met=num(m[2]) < 10 and bool(found and found[1] == "True")))
    return rows


def parse_linear(out: str) -> list[Row]:
    b = "linear"
    m = find(out, r"^logquake total ([\d.]+) s(?:; porcupine total ([\d.]+) s; ratio ([\d.]+))?")
    if not m:
        return []
    n = len(re.findall(r"^sim-\d", out, re.MULTILINE))
    if m[2]:
        imported = len(re.findall(r"^(?:jepsen|knossos) ", out, re.MULTILINE))
        return [row(b, f"cas-register histories ({n} simulated, {imported} imported)", num(m[1]), "s",
                    reference=f"Porcupine {num(m[2]):.3f} s", ratio=num(m[3]))]
    return [row(b, f"cas-register histories ({n} simulated)", num(m[1]), "s",
                reference="Porcupine skipped: LOGQUAKE_PORCUPINE not set")]


def parse_raft(out: str) -> list[Row]:
    b, rows = "raft", []
    if m := find(out, r"^raft 3 nodes, (\d+) x 1 KiB per entry: ([\d,]+) records/s"):
        rate = num(m[2])
        for label in ("bytes copy", "codec alone"):
            if r := find(out, rf"reference {label}:\s+([\d,]+) records/s"):
                rows.append(row(b, f"in-process Raft, {m[1]} records/entry", rate, "records/s",
                                reference=f"{label} {num(r[1]):,.0f} records/s", ratio=rate / num(r[1])))
    if m := find(out, r"^raft 3 nodes, 1 record per entry: ([\d,]+) entries/s"):
        rows.append(row(b, "in-process Raft, 1 record/entry", num(m[1]), "entries/s"))
    if m := find(out, r"fsync=never ([\d,]+) records/s, fsync=always .*? ([\d,]+) records/s"):
        rows.append(row(b, "SegmentLog append, fsync always", num(m[2]), "records/s",
                        reference=f"fsync never {num(m[1]):,.0f} records/s", ratio=num(m[2]) / num(m[1])))
    if m := find(out, r"^simulation: (\d+) random schedules .*\(([\d,]+)/s\), (\d+) with violations"):
        rows.append(row(b, "random simulation schedules", num(m[2]), "schedules/s",
                        reference=f"{m[3]} of {m[1]} with violations"))
    return rows


def parse_report(out: str) -> list[Row]:
    b = "report"
    ref = find(out, r"^reference \(read_history alone, ([\d,]+) ops\): ([\d.]+) s wall")
    m = find(out, r"^report: ([\d.]+) s wall .*?; ([\d.]+) MB; peak RSS (\d+) MB")
    if not (ref and m):
        return []
    return [row(b, f"report.html for {ref[1]} ops", num(m[1]), "s",
                reference=f"read_history alone {num(ref[2]):.2f} s", ratio=num(m[1]) / num(ref[2]),
                target="< 30 s (1M ops)", met=num(m[1]) < 30),
            row(b, "report.html size", num(m[2]), "MB", target="< 20 MB", met=num(m[2]) < 20),
            row(b, "report peak RSS", num(m[3]), "MB")]


@dataclass(frozen=True, kw_only=True)
class Bench:
    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    parse: Callable[[str], list[Row]] | None  # None: the script writes its rows with --json


BENCHES = (
    Bench(name="broker", script="bench_broker.py", full=(), quick=("--messages", "20000"), parse=parse_broker),
    Bench(name="jetstream", script="bench_jetstream.py", full=("--messages", "100000"),
          quick=("--messages", "20000", "--seconds", "5", "--rounds", "1", "--up-rounds", "1"), parse=None),
    Bench(name="jetstream-txn", script="bench_jetstream_txn.py", full=(), quick=("--seconds", "5", "--rounds", "1"),
          parse=None),
    Bench(name="lab", script="bench_lab.py", full=(), quick=("--rounds", "3"), parse=parse_lab),
    Bench(name="harness", script="bench_harness.py", full=(), quick=("--seconds", "5"), parse=parse_harness),
    Bench(name="checker", script="bench_checker.py", full=(), quick=("--ops", "100000", "--g1c-txns", "10000"),
          parse=parse_checker),
    Bench(name="linear", script="bench_linear.py", full=(), quick=("--ops", "1000", "--histories", "4"),
          parse=parse_linear),
    Bench(name="raft", script="bench_raft.py", full=(), quick=("--records", "20000", "--sim", "20"),
          parse=parse_raft),
    Bench(name="report", script="bench_report.py", full=(), quick=("--lines", "100000"), parse=parse_report),
)


# --- running -------------------------------------------------------------------------------------


def run_one(b: Bench, quick: bool, logdir: Path, timeout: float) -> list[Row]:
    """Run one script (`b.script` relative to benchmarks/, or absolute) and turn its output into rows.

    Never raises for the script's sake: a timeout, a non-zero exit, output no parser
    understands, a parser that trips, or a missing rows file each become one "run" row
    with the value missing and the reason, so the table shows the gap and the exit code is 1.
    """
    args = [sys.executable, str(HERE / b.script), *(b.quick if quick else b.full)]
    rows_file = logdir / f"{b.name}.rows.json"
    if b.parse is None:
        args += ["--json", str(rows_file)]
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        (logdir / f"{b.name}.log").write_text(f"$ {' '.join(args)}\n{out}\n--- timed out after {timeout:.0f} s\n")
        return [row(b.name, "run", None, reference=f"timed out after {timeout:.0f} s")]
    (logdir / f"{b.name}.log").write_text(f"$ {' '.join(args)}\n{p.stdout}\n--- stderr\n{p.stderr}")
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1][:120]
        return [row(b.name, "run", None, reference=f"exit {p.returncode}: {tail}")]
    rows = read_rows(b, p.stdout, rows_file)
    return rows or [row(b.name, "run", None, reference="no figures found in its output")]


def read_rows(b: Bench, stdout: str, rows_file: Path) -> list[Row]:
    """The rows of a script that exited 0: its parser's, or its rows file's (parse None)."""
    if b.parse is None:
        try:
            rows = json.loads(rows_file.read_text())
        except (OSError, ValueError) as e:
            return [row(b.name, "run", None, reference=f"no rows file from --json: {type(e).__name__}: {e}"[:160])]
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "metric" in r for r in rows):
            return [row(b.name, "run", None, reference="rows file is not a list of rows")]
        return [{**row(b.name, "?", None), **r} for r in rows]
    try:
        return b.parse(stdout)
    except Exception as e:  # noqa: BLE001 - a parser out of step with its script must not lose the table
        return [row(b.name, "run", None, reference=f"parser failed: {type(e).__name__}: {e}"[:160])]


def machine() -> dict:
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), "0")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE.parent).stdout.strip()
    return {"nproc": os.cpu_count(), "mem_gib": round(int(mem) / 2**20, 1), "python": sys.version.split()[0],
            "commit": commit, "load_before": os.getloadavg()}


def machine_probe(seconds: float = 3.0) -> dict | None:
    """machine_probe.py's figures (loop and objects M/CPU s, fresh memory MB/s, fdatasync ms); None if it failed."""
    try:
        p = subprocess.run([sys.executable, str(HERE / "machine_probe.py"), "--json", "--seconds", str(seconds)],
                           capture_output=True, text=True, timeout=120, check=False)
        return json.loads(p.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        return None


_PROBE_PARTS = (("python_mops", "python loop {:.1f} M/s"), ("objects_mops", "objects {:.2f} M/s"),
                ("fresh_memory_mb_s", "fresh memory {:,.0f} MB/s"), ("fdatasync_ms", "fdatasync {:.2f} ms"))


def _probe_text(p: dict | None) -> str:
    if not p:
        return "probe failed"
    return ", ".join(text.format(p[k]) for k, text in _PROBE_PARTS if k in p)


def fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 10 else f"{v:,.1f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


COLUMNS = ("benchmark", "metric", "value", "unit", "reference", "ratio", "target", "met")


def markdown(meta: dict, rows: list[Row]) -> str:
    head = (f"Measured {meta['date']} ({'quick' if meta['quick'] else 'full'} sizes), commit {meta['commit']}, "
            f"{meta['nproc']} CPUs, {meta['mem_gib']} GiB, Python {meta['python']}; load average "
            f"{'/'.join(f'{x:.1f}' for x in meta['load_before'])} before, "
            f"{'/'.join(f'{x:.1f}' for x in meta['load_after'])} after; {meta['seconds']:.0f} s in all ("
            f"{', '.join(f'{k} {v:.0f} s' for k, v in meta['durations_s'].items())}).")
    if "probe_before" in meta:  # machine_probe.py: tells a slow machine from a slow change
        head += (f" Machine probe before: {_probe_text(meta['probe_before'])}; after: "
                 f"{_probe_text(meta.get('probe_after'))}.")
    head += "\n\n"
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(c)).replace("|", "/") for c in COLUMNS) + " |" for r in rows]
    return head + "\n".join(lines) + "\n"


def show(console: Console, rows: list[Row]) -> None:
    t = Table(*COLUMNS)
    for r in rows:
        style = {True: "green", False: "red"}.get(r.get("met"), "")
        t.add_row(*(fmt(r.get(c)) for c in COLUMNS), style=style)
    console.print(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: a few minutes in all")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=[b.name for b in BENCHES])
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--timeout", type=float, help="seconds per benchmark (default 900 quick, 7200 full)")
    a = ap.parse_args()
    benches = [b for b in BENCHES if not a.only or b.name in a.only]
    timeout = a.timeout or (900 if a.quick else 7200)
    probe_s = 1.0 if a.quick else 3.0  # per CPU probe of machine_probe.py
    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "quick": a.quick, **machine(),
            "probe_before": machine_probe(probe_s)}
    console, rows, t0, durations = Console(), [], time.monotonic(), {}
    if not console.is_terminal:  # a log file: keep each row on one line
        console = Console(width=220)
    with tempfile.TemporaryDirectory(prefix="logquake-bench-logs-") as tmp, Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), console=console) as progress:
        logdir = Path(tmp)
        task = progress.add_task("benchmarks", total=len(benches))
        for b in benches:
            progress.update(task, description=f"{b.name} ({b.script})")
            started = time.monotonic()
            got = run_one(b, a.quick, logdir, timeout)
            durations[b.name] = round(time.monotonic() - started, 1)
            rows += got
            progress.console.print(f"{b.name}: {len(got)} rows")
            progress.advance(task)
        meta |= {"load_after": os.getloadavg(), "seconds": time.monotonic() - t0, "durations_s": durations,
                 "probe_after": machine_probe(probe_s)}
        a.out.mkdir(parents=True, exist_ok=True)
        stem = a.out / datetime.now(UTC).strftime("%Y-%m-%dT%H%M%S")
        logs = stem.with_suffix(".logs")
        logs.mkdir()
        for f in logdir.iterdir():
            (logs / f.name).write_text(f.read_text())
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    stem.with_suffix(".md").write_text(markdown(meta, rows))
    show(console, rows)
    console.print(f"wrote {stem}.json, {stem}.md and each script's output in {logs}/")
    return 1 if any(r["value"] is None for r in rows if r["metric"] == "run") else 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the queue checker.

1. A generated transactional history of --ops history ops (10 active keys with rotation,
   10 workers, 1% fail, 1% info), written as history.jsonl: read it with
   logquake.history.load_history and check it with check_history, in a fresh process so
   its peak RSS is the checker's. Reports ops/s of the check alone and of read + check.
2. A history of --g1c-txns transactions with one G1c cycle planted (two transactions that
   each poll the other's send), checked without ww-deps: is the cycle found, how fast.

Times are CPU seconds (time.process_time) of one core. As a reference measured in the
same run (in a fresh process of its own), the bare cost of json.loads over every line of
the same file is reported, and each time also as a ratio to it, so figures from a loaded
machine can still be compared.

    .venv/bin/python benchmarks/bench_checker.py [--ops 1000000] [--g1c-txns 100000]

Generated histories are cached in --cache-dir (default /tmp/logquake-bench).

    .venv/bin/python benchmarks/bench_checker.py --scale 10 [--max-memory 8G]

also checks the big history tiled 10 times (10 copies one after the other, each on keys and
processes of its own, cached too: 2.3 GB at 1M ops) as `logquake check --max-memory` would:
the row says it was refused, with the estimate, when that is over the limit; otherwise it
gives the check's time as a ratio to the 1x check of the same run, and its peak RSS.

    .venv/bin/python benchmarks/bench_checker.py --stages

prints instead where check_history's time goes on the big history: each stage timed
alone, one after the other in one fresh process (CPU s; not a ratio, for profiling).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import orjson

from logquake.checker import CheckOptions, check_history
from logquake.checker.generate import SimConfig, simulate
from logquake.checker.memory import parse_size, plan_check
from logquake.checker.queue_stream import HistoryFile
from logquake.errors import UserError
from logquake.history import Op, load_history, write_history


def generate(path: Path, client_ops: int, seed: int, plant_g1c: bool = False) -> None:
    if path.exists():
        return
    t = time.process_time()
    cfg = SimConfig(
        ops=client_ops,
        workers=10,
        active_keys=10,
        max_writes_per_key=1024,
        txn=True,
        p_fail=0.01,
        p_info=0.01,
        seed=seed,
    )
    ops, _ = simulate(cfg)
    if plant_g1c:
        ops += _g1c(len(ops), ops[-1].time)
    tmp = path.with_suffix(".tmp")
    write_history(tmp, ops)
    tmp.rename(path)
    print(f"generated {path.name}: {len(ops)} ops in {time.process_time() - t:.1f} s", file=sys.stderr)


def tile(src: Path, dst: Path, times: int) -> None:
    """dst: `times` copies of the history src, one after the other, each copy on keys and
    processes of its own: a history `times` as long with src's shape (read and written one
    line at a time, so a 10M-op history needs no more memory than a 1M-op one)."""
    if dst.exists():
        return
    t = time.process_time()
    n = keys = procs = last = 0
    with open(src, "rb") as fh:
        for line in fh:
            d = orjson.loads(line)
            n, last = n + 1, d["time"]
            procs = max(procs, d["process"] + 1)
            if d["f"] in ("assign", "subscribe"):
                keys = max(keys, *(k + 1 for k in d["value"]))
            for m in d["value"] if d["f"] in ("send", "poll", "txn") else ():
                if m[0] == "send":
                    keys = max(keys, m[1] + 1)
                elif len(m) > 1 and m[1]:
                    keys = max(keys, *(int(k) + 1 for k in m[1]))
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        for i in range(times):
            dk, dp = i * keys, i * procs
            with open(src, "rb") as fh:
                for line in fh:
                    d = orjson.loads(line)
                    d["index"] += i * n
                    d["time"] += i * (last + 1)
                    d["process"] += dp
                    if d["f"] in ("assign", "subscribe"):
                        d["value"] = [k + dk for k in d["value"]]
                    elif d["value"]:
                        d["value"] = [_shifted(m, dk) for m in d["value"]]
                    out.write(orjson.dumps(d) + b"\n")
    tmp.rename(dst)
    print(f"tiled {dst.name}: {times * n} ops in {time.process_time() - t:.1f} s", file=sys.stderr)


def _shifted(mop: list, dk: int) -> list:
    if mop[0] == "send":
        return ["send", mop[1] + dk, *mop[2:]]
    if len(mop) > 1 and mop[1]:
        return ["poll", {str(int(k) + dk): pairs for k, pairs in mop[1].items()}]
    return mop


def _g1c(index: int, now: int) -> list[Op]:
    """T1 sends a to key A and polls B's b; T2 sends b to B and polls a: T1 <wr T2 <wr T1."""
    a, b = 10**6, 10**6 + 1

    def op(p: int, typ: str, value: list, i: int) -> Op:
        return Op(
            index=index + i, time=now + (i + 1) * 1000, process=10**6 + p, type=typ, f="txn", value=value
        )

    return [
        op(1, "invoke", [["send", a, 0], ["poll"]], 0),
        op(2, "invoke", [["send", b, 0], ["poll"]], 1),
        op(1, "ok", [["send", a, [0, 0]], ["poll", {str(b): [[0, 0]]}]], 2),
        op(2, "ok", [["send", b, [0, 0]], ["poll", {str(a): [[0, 0]]}]], 3),
    ]


def reference(path: Path) -> float:
    """CPU seconds of json.loads over every line (run in a process of its own)."""
    t0 = time.process_time()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            json.loads(line)
    return time.process_time() - t0


def measure(path: Path, ww_deps: bool, streamed: bool = False) -> dict:
    """Run in a fresh process: read and check, as `logquake check` does (`streamed`: as
    `logquake check --max-memory` does when the history does not fit: read_s is then 0,
    the check reads the file).

    The reference pass is not run here: run first in this process it made the check
    0.6-1.0 s slower (the same code, alternating), an effect of the heap it leaves behind,
    not of the checker.
    """
    t0 = time.process_time()
    ops = HistoryFile(path) if streamed else load_history(path)
    t1 = time.process_time()
    r = check_history(ops, CheckOptions(ww_deps=ww_deps, txn=True, time_budget=600))
    t2 = time.process_time()
    return {
        "ops": r["stats"]["client_ops"] if streamed else len(ops),  # (no nemesis in these histories)
        "read_s": t1 - t0,
        "check_s": t2 - t1,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "valid": r["valid"],
        "error_types": r["error_types"],
        "bad_error_types": r["bad_error_types"],
        "g1c": r["anomalies"].get("G1c", {}).get("count", 0),
        "cycle_search": r.get("cycle_search"),
    }


def stages(path: Path) -> list[tuple[str, float]]:
    """CPU seconds of each stage of check_history on one history, in its order."""
    import gc

    from logquake.checker import queue
    from logquake.checker.cycles import cycle_cases
    from logquake.checker.queue_build import build_index

    ops = load_history(path)
    opts = CheckOptions(txn=True, time_budget=600)
    gc.disable()  # as check_history does
    out: list[tuple[str, float]] = []

    def timed(name: str, fn):
        t = time.process_time()
        got = fn()
        out.append((name, time.process_time() - t))
        return got

    held = [timed("build_index", lambda: build_index(ops))]  # the index's only reference
    for name, fn in queue._CASES:
        timed(name, lambda fn=fn: fn(held[0], opts))
    timed("unseen", lambda: queue.unseen_analysis(held[0]))
    timed("cycles", lambda: cycle_cases(held[0], opts))
    timed("realtime-lag", lambda: queue.realtime_lag(held[0]))
    timed("info-causes", lambda: queue.info_causes(held[0]))
    timed("freeing the index", held.clear)  # check_history pays this too, on return
    return out


def scaled(big: Path, times: int, st: dict, limit: int) -> list[tuple[str, str, str]]:
    """Rows for the big history tiled `times` times, checked as `logquake check --max-memory`
    would: refused if its estimate is over `limit`, else measured (time as a ratio to the
    big history's check from the file, `st`, measured in this run)."""
    path = big.with_name(f"{big.stem}x{times}.jsonl")
    tile(big, path, times)
    name = f"check of {times}x the history"
    try:
        plan = plan_check(path, limit)
    except UserError as e:
        return [(name, "refused", str(e))]
    s = in_subprocess(path, ww_deps=True, streamed=plan.streamed, reference=False)
    how = "checked from the file" if plan.streamed else "plain read"
    return [
        (f"{name} ({s['ops']:,} ops)", f"{s['check_s']:.2f} s", f"{s['check_s'] / st['check_s']:.2f}x the 1x check from the file; target <= {1.2 * times:.0f}x"),
        (f"peak RSS, {times}x", f"{s['peak_rss_mb']:,.0f} MB", f"{how}; limit {limit / 2**20:,.0f} MB; estimated {plan.estimate / 2**20:,.0f} MB"),
        (f"verdict, {times}x", str(s["valid"]), ",".join(s["error_types"])),
    ]


def in_subprocess(path: Path, ww_deps: bool, streamed: bool = False, reference: bool = True) -> dict:
    cmd = [sys.executable, __file__, "--measure", str(path)] + ([] if ww_deps else ["--no-ww-deps"])
    cmd += ["--streamed"] if streamed else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    got = json.loads(out.stdout)
    if not reference:
        return got
    cmd = [sys.executable, __file__, "--reference-of", str(path)]
    got["json_s"] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=1_000_000, help="history ops (invocations + completions)")
    ap.add_argument("--g1c-txns", type=int, default=100_000)
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/logquake-bench"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--no-ww-deps", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--streamed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scale", type=int, default=0, help="also check the big history tiled this many times")
    ap.add_argument("--max-memory", default="8G", help="the limit of the --scale check (default 8G)")
    ap.add_argument("--stages", action="store_true", help="time check_history's stages on the big history")
    ap.add_argument("--stages-of", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--reference-of", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reference_of:
        print(json.dumps(reference(args.reference_of)))
        return
    if args.measure:
        print(json.dumps(measure(args.measure, not args.no_ww_deps, args.streamed), default=str))
        return
    if args.stages_of:
        print(json.dumps(stages(args.stages_of)))
        return
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    big = args.cache_dir / f"queue-{args.ops}-{args.seed}.jsonl"
    g1c = args.cache_dir / f"g1c-{args.g1c_txns}-{args.seed}.jsonl"
    # Each client op is two history ops; the drain at the end adds a few more.
    generate(big, args.ops // 2, args.seed)
    generate(g1c, args.g1c_txns, args.seed, plant_g1c=True)
    if args.stages:
        cmd = [sys.executable, __file__, "--stages-of", str(big)]
        rows = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        print(f"stages of check_history on {big.name} (CPU s, one process, load {os.getloadavg()[0]:.1f})")
        for name, sec in rows:
            print(f"  {name:<22} {sec:6.2f}")
        print(f"  {'total':<22} {sum(s for _, s in rows):6.2f}")
        return
    load_before = os.getloadavg()
    m = in_subprocess(big, ww_deps=True)
    st = in_subprocess(big, ww_deps=True, streamed=True, reference=False)
    c = in_subprocess(g1c, ww_deps=False)
    load = "load average " + " -> ".join(
        "/".join(f"{x:.1f}" for x in la) for la in (load_before, os.getloadavg())
    )
    rows = [
        ("machine", f"{os.cpu_count()} CPUs", load),
        ("history ops", f"{m['ops']:,}", ""),
        ("reference: json.loads of every line", f"{m['json_s']:.2f} s", "1.00x"),
        ("read_history", f"{m['read_s']:.2f} s", f"{m['read_s'] / m['json_s']:.2f}x"),
        ("check_history", f"{m['check_s']:.2f} s", f"{m['check_s'] / m['json_s']:.2f}x"),
        ("check ops/s (one core)", f"{m['ops'] / m['check_s']:,.0f}", "target >= 100,000"),
        ("read + check ops/s", f"{m['ops'] / (m['read_s'] + m['check_s']):,.0f}", f"{(m['read_s'] + m['check_s']) / m['json_s']:.2f}x"),
        ("peak RSS", f"{m['peak_rss_mb']:,.0f} MB", "target < 4096 MB"),
        ("verdict", str(m["valid"]), ",".join(m["error_types"])),
        ("from the file: read + check", f"{st['check_s']:.2f} s", f"{st['check_s'] / m['json_s']:.2f}x (--max-memory's bounded way)"),
        ("from the file: peak RSS", f"{st['peak_rss_mb']:,.0f} MB", f"verdict {st['valid']}, same: {st['error_types'] == m['error_types']}"),
        (f"G1c history ({c['ops']:,} ops)", f"check {c['check_s']:.2f} s", "target < 10 s"),
        (
            "planted G1c found",
            str(c["g1c"] >= 1 and "G1c" in c["bad_error_types"]),
            ",".join(c["bad_error_types"]),
        ),
    ]
    if args.scale:
        rows += scaled(big, args.scale, st, parse_size(args.max_memory))
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>16}  {note}")


if __name__ == "__main__":
    main()

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

from logquake.checker import CheckOptions, check_history
from logquake.checker.generate import SimConfig, simulate
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


def measure(path: Path, ww_deps: bool) -> dict:
    """Run in a fresh process: read and check, as `logquake check` does.

    The reference pass is not run here: run first in this process it made the check
    0.6-1.0 s slower (the same code, alternating), an effect of the heap it leaves behind,
    not of the checker.
    """
    t0 = time.process_time()
    ops = load_history(path)
    t1 = time.process_time()
    r = check_history(ops, CheckOptions(ww_deps=ww_deps, txn=True, time_budget=600))
    t2 = time.process_time()
    return {
        "ops": len(ops),
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


def in_subprocess(path: Path, ww_deps: bool) -> dict:
    cmd = [sys.executable, __file__, "--measure", str(path)] + ([] if ww_deps else ["--no-ww-deps"])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    got = json.loads(out.stdout)
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
    ap.add_argument("--stages", action="store_true", help="time check_history's stages on the big history")
    ap.add_argument("--stages-of", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--reference-of", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reference_of:
        print(json.dumps(reference(args.reference_of)))
        return
    if args.measure:
        print(json.dumps(measure(args.measure, not args.no_ww_deps), default=str))
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
        ("read + check ops/s", f"{m['ops'] / (m['read_s'] + m['check_s']):,.0f}", ""),
        ("peak RSS", f"{m['peak_rss_mb']:,.0f} MB", "target < 4096 MB"),
        ("verdict", str(m["valid"]), ",".join(m["error_types"])),
        (f"G1c history ({c['ops']:,} ops)", f"check {c['check_s']:.2f} s", "target < 10 s"),
        (
            "planted G1c found",
            str(c["g1c"] >= 1 and "G1c" in c["bad_error_types"]),
            ",".join(c["bad_error_types"]),
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>16}  {note}")


if __name__ == "__main__":
    main()

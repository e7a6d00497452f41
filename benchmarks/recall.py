"""The harness's recall: how often each unsafe broker mode is caught, and how often the safe
broker stays valid, over seeded runs of docs/recall-matrix.yaml.

    .venv/bin/python benchmarks/recall.py                       # 10 seeds per cell, ~2-3 h on 2 cores
    .venv/bin/python benchmarks/recall.py --test-count 3 --time-limit 20 --only unsafe
    .venv/bin/python benchmarks/recall.py --only ack-early --only safe/queue/kill
    .venv/bin/python benchmarks/recall.py --only safe/ --test-count 3 --seed 4   # seeds 4, 5, 6
    .venv/bin/python benchmarks/recall.py --table results/recall/*/index.json   # one table of several passes

Prints a markdown table (cell, expected, as-expected k/n, anomalies seen) for docs/recall.md;
the runs and index.json land under --results-dir. Exit 1 when a cell misses its target
(>= 9/10 caught for an unsafe mode, 10/10 valid for the safe broker, scaled to n).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

from logquake.matrix import RunResult, load_matrix, matches, run_matrix, summarize

MATRIX = Path(__file__).resolve().parent.parent / "docs" / "recall-matrix.yaml"


def _target(row: dict) -> int:
    n = row["runs"]
    return n if row["expect"] == ["valid"] else math.ceil(0.9 * n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=MATRIX)
    ap.add_argument("--test-count", type=int, default=None)
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--only", action="append", default=[],
                    help="cells with a name part starting with this: `safe/txn` is not `unsafe/txn_markers`, "
                         "a trailing `$` asks for the whole rest of the name (repeatable)")
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: the matrix's)")
    ap.add_argument("--results-dir", default="results")
    ap.add_argument("--table", type=Path, nargs="+", help="no runs: the table of these index.json files together")
    args = ap.parse_args(argv)

    if args.table:
        runs = [RunResult.from_json(r)
                for path in args.table for r in json.loads(path.read_text())["runs"]]
        if args.only:
            runs = [r for r in runs if matches(r.cell, args.only)]
        print(f"{len(runs)} runs from {len(args.table)} index file(s)\n")
        return _print_table(runs)
    matrix = load_matrix(args.config, test_count=args.test_count, time_limit=args.time_limit)
    if args.seed is not None:
        matrix = replace(matrix, seed=args.seed)
    if args.only:
        matrix = replace(matrix, cells=tuple(c for c in matrix.cells if matches(c.name, args.only)))
        if not matrix.cells:
            print(f"recall.py: no cell matches --only {' --only '.join(args.only)}", file=sys.stderr)
            return 2
    out_dir = Path(args.results_dir) / "recall" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    t0 = time.monotonic()
    runs = run_matrix(matrix, out_dir, results_dir=args.results_dir,
                      on_result=lambda r: print(f"  {r.cell} seed {r.seed}: {r.outcome} ({r.message}) "
                                                f"{r.duration:.0f} s", file=sys.stderr, flush=True))
    limit = matrix.cells[0].config.get("time_limit") if matrix.cells else None
    print(f"\n{matrix.test_count} seeds per cell from {matrix.seed}, time_limit {limit} s, "
          f"{time.monotonic() - t0:.0f} s wall; index: {out_dir / 'index.json'}\n")
    return _print_table(runs)


def _print_table(runs: list[RunResult]) -> int:
    """The markdown recall table (seeds listed per cell); 1 when a cell misses its target."""
    rows = summarize(runs)
    seeds: dict[str, list[int]] = {}
    for r in runs:
        seeds.setdefault(r.cell, []).append(r.seed)
    print("| cell | expected | as expected | target | bad anomalies seen (runs) | seeds |")
    print("|---|---|---|---|---|---|")
    missed = 0
    for row in rows:
        ok = row["pass"] >= _target(row)
        missed += not ok
        seen = ", ".join(f"{k} ({v})" for k, v in sorted(row["anomalies"].items())) or "-"
        print(f"| {row['cell']} | {' or '.join(row['expect'])} | {row['pass']}/{row['runs']}"
              f"{'' if ok else ' **miss**'} | {_target(row)}/{row['runs']} | {seen} | {_ranges(seeds[row['cell']])} |")
    return 1 if missed else 0


def _ranges(seeds: list[int]) -> str:
    """1, 2, 3, 5 -> 1-3, 5."""
    out: list[str] = []
    for s in sorted(set(seeds)):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())

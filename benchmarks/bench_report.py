"""How long report.html takes for a big history, and how big it gets.

    .venv/bin/python benchmarks/bench_report.py [--lines 1000000] [--workdir /tmp/logquake-bench-report]

Builds a run directory with a synthetic history of `--lines` ops (a correct log under
flip-flop faults, tests/results/results_fixtures.py; cached in --workdir between runs) and
a results.json naming ops and keys deep inside it, then times `write_report` against a
reference measured in the same run on the same file: streaming the history through
`read_history` and doing nothing else, the floor any report must pay. Prints the report's
time, its ratio to the reference, its size, and the process's peak memory. The target
for 1,000,000 ops: under 30 s and under 20 MB.

`--check` also runs the real checker to make results.json (slow: minutes for 1M ops).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "results"))

from results_fixtures import make_run_dir, write_synth_history  # noqa: E402

from logquake.history import load_history, read_history  # noqa: E402
from logquake.results.report import write_report  # noqa: E402


def synthetic_results(history: Path, n_lines: int) -> dict:
    """A results.json in the checker's shape whose examples name ops and keys mid-history."""
    named = []
    for op in read_history(history, validate=False):
        if op.index >= n_lines // 2 and op.type == "ok" and op.f == "send":
            named.append(op)
            if len(named) == 3:
                break
    refs = [{"index": o.index, "process": o.process, "time": o.time, "type": o.type, "f": o.f} for o in named]
    errs = [{"key": o.value[0][1], "value": o.value[0][2][1], "offset": o.value[0][2][0], "writer": r,
             "explanation": f"op {o.index} sent a value that (for this benchmark) counts as lost"}
            for o, r in zip(named, refs, strict=True)]
    return {"valid": False, "bad_error_types": ["lost-write"], "error_types": ["lost-write"],
            "anomalies": {"lost-write": {"count": len(errs), "errs": errs}}}


def build(workdir: Path, n_lines: int, check: bool) -> Path:
    run = workdir / "queue" / f"bench-{n_lines}"
    history = run / "history.jsonl"
    if not history.exists():
        print(f"generating a {n_lines:,}-line history in {run} (cached for next time) ...", flush=True)
        make_run_dir(workdir, None, None, start=f"bench-{n_lines}")
        write_synth_history(history.with_suffix(".tmp"), n_lines, seed=1, keys=10, workers=10)
        history.with_suffix(".tmp").replace(history)
    if check:
        from logquake.checker import CheckOptions, check_history

        t = time.perf_counter()
        results = check_history(load_history(history, validate=False), CheckOptions())
        print(f"checker: {time.perf_counter() - t:.1f} s, valid={results['valid']}")
    else:
        results = synthetic_results(history, n_lines)
    (run / "results.json").write_text(json.dumps(results))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/logquake-bench-report"))
    ap.add_argument("--check", action="store_true", help="make results.json with the real checker")
    args = ap.parse_args()
    run = build(args.workdir, args.lines, args.check)
    history = run / "history.jsonl"
    print(f"history: {history.stat().st_size / 1e6:.1f} MB")

    # Wall time depends on what else the machine runs; CPU time of this process much less.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wall, cpu = time.perf_counter(), time.process_time()
        n = sum(1 for _ in read_history(history, validate=False))
        ref_wall, ref_cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"reference (read_history alone, {n:,} ops): {ref_wall:.2f} s wall, {ref_cpu:.2f} s CPU")

    wall, cpu = time.perf_counter(), time.process_time()
    out = write_report(run)
    took, took_cpu = time.perf_counter() - wall, time.process_time() - cpu
    size = out.stat().st_size / 1e6
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"report: {took:.2f} s wall ({took / ref_wall:.2f} x reference), {took_cpu:.2f} s CPU "
          f"({took_cpu / ref_cpu:.2f} x reference); {size:.1f} MB; peak RSS {peak:.0f} MB")
    print(f"target for 1M ops: < 30 s, < 20 MB -> time {'ok' if took < 30 else 'OVER'} (CPU "
          f"{'ok' if took_cpu < 30 else 'OVER'}), size {'ok' if size < 20 else 'OVER'}")


if __name__ == "__main__":
    main()

"""The register models' `simplify` (dropping indeterminate writes nobody observed): time to check
offsets-like histories with it, against the same checker without it, in the same run.

    .venv/bin/python benchmarks/bench_offsets_check.py [--seed 1] [--ops 6000] [--info 0.02]
    .venv/bin/python benchmarks/bench_offsets_check.py results/offsets/<run>/history.jsonl ...

Simulated histories look like an offsets run under faults: 6 independent keys, 10 processes,
unique increasing writes, half reads; an op takes effect at a random instant inside its
interval; a share `--info` of the writes is indeterminate (took effect or not, at random, and
retires its process). Histories given as arguments (real runs' history.jsonl) are measured too.
Prints one row per history and the ratio of the totals; the verdicts must agree (exit 1 if not).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

from logquake.checker.linear import check_linearizable
from logquake.checker.models import register
from logquake.history import Op, load_history

PLAIN = replace(register, simplify=list)


def simulate(rng: random.Random, *, ops: int, info: float, keys: int = 6, processes: int = 10) -> list[Op]:
    """An offsets-like register history (see the module docstring), in completion order."""
    planned = []  # (call, effect, ret or None, process, f, key, value)
    clock = [0] * processes
    proc = list(range(processes))
    next_proc = processes
    next_value = dict.fromkeys(range(keys), 1)
    for n in range(ops):
        w = n % processes
        call = clock[w] + rng.randint(1, 40)
        effect = call + rng.randint(0, 30 * processes)
        ret = effect + rng.randint(0, 30 * processes)
        clock[w] = ret
        k = rng.randrange(keys)
        if rng.random() < 0.5:
            planned.append((call, effect, ret, proc[w], "read", k, None))
            continue
        v = next_value[k]
        next_value[k] = v + 1
        if rng.random() < info:
            # Indeterminate: took effect (or not) and its process is never used again.
            planned.append((call, effect if rng.random() < 0.5 else None, None, proc[w], "write", k, v))
            proc[w], next_proc = next_proc, next_proc + 1
        else:
            planned.append((call, effect, ret, proc[w], "write", k, v))
    state: dict[int, int | None] = {}
    reads: dict[int, int | None] = {}
    for i, (_, effect, _, _, f, k, v) in sorted(enumerate(planned), key=lambda e: (e[1][1] or 0, e[0])):
        if effect is None:
            continue
        if f == "write":
            state[k] = v
        else:
            reads[i] = state.get(k)
    events = []
    for i, (call, _, ret, p, f, k, v) in enumerate(planned):
        events.append((call, 0, Op(process=p, type="invoke", f=f, value=[k, v], time=call)))
        if ret is not None:
            out = [k, reads[i]] if f == "read" else [k, v]
            events.append((ret, 1, Op(process=p, type="ok", f=f, value=out, time=ret)))
        else:
            events.append((10**12, 1, Op(process=p, type="info", f=f, value=[k, v], time=10**12)))
    events.sort(key=lambda e: (e[0], e[1]))
    return [replace(op, index=i) for i, (*_, op) in enumerate(events)]


def _timed(ops: list[Op], model, repeat: int) -> tuple[object, float]:
    """The verdict and the best of `repeat` timings (the machine is shared: take the least noisy)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = check_linearizable(ops, model)
        best = min(best, time.perf_counter() - t0)
    return res["valid"], best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("histories", nargs="*", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=6000)
    ap.add_argument("--info", type=float, default=0.02)
    ap.add_argument("--simulated", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cases = [(f"sim {i} ({args.ops} ops, info {args.info})", simulate(rng, ops=args.ops, info=args.info))
             for i in range(args.simulated)]
    cases += [(str(p), load_history(p)) for p in args.histories]
    print(f"{'history':<44} {'info':>5} {'verdict':>8} {'simplify s':>11} {'plain s':>9} {'ratio':>6}")
    total_s = total_p = 0.0
    mismatches = 0
    _timed(cases[0][1], register, 1)  # warm-up: imports and first-call costs out of the rows
    for name, ops in cases:
        v1, s = _timed(ops, register, args.repeat)
        v2, p = _timed(ops, PLAIN, args.repeat)
        mismatches += v1 != v2
        total_s, total_p = total_s + s, total_p + p
        infos = sum(1 for op in ops if op.type == "info" and op.process != "nemesis")
        print(f"{name[-44:]:<44} {infos:>5} {str(v1):>8} {s:>11.3f} {p:>9.3f} {s / p:>6.2f}"
              + ("  VERDICTS DIFFER" if v1 != v2 else ""))
    print(f"total: simplify {total_s:.3f} s, plain {total_p:.3f} s, ratio {total_s / total_p:.2f}; "
          f"verdict mismatches {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

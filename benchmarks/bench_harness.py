"""Harness throughput: sustained ops/s with full history recording vs. raw client calls.

Both halves run in the same process against the same cluster, one after the other, with the
same workers, op mix (the queue generator, no txn) and client library:

- raw:     each thread calls the client adapter's invoke() directly, nothing recorded;
- harness: the runner's workers (timeout wrapper, generator lock, history.jsonl streaming,
           live counters), rate limit set far above what the cluster can do.

Prints ops/s of both, their ratio and the harness's overhead per op. Usage:

    .venv/bin/python benchmarks/bench_harness.py [--workers 20] [--seconds 15] [--cluster lab|local]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from pathlib import Path

from logquake.config import resolve_config
from logquake.history import HistoryWriter, load_history
from logquake.runner import MAIN, Pacer, Recorder, Stats, Worker, join_all, run_workers
from logquake.workloads import Context, make_client, make_generator


@contextlib.contextmanager
def _cluster(kind: str, cfg, tmp: Path):
    if kind == "local":
        from logquake.broker import LocalCluster

        with LocalCluster(n=cfg.nodes, base_dir=tmp / "local") as c:
            c.wait_ready()
            yield c.bootstrap_servers
        return
    from logquake.runner import open_cluster

    with open_cluster(cfg, tmp) as c:
        c.wait_ready(120.0)
        yield c.bootstrap_servers


def _raw(cfg, bootstrap: str, seconds: float) -> int:
    gen, lock = make_generator(cfg), threading.Lock()
    done = [0] * cfg.concurrency
    over = threading.Event()

    def loop(w: int) -> None:
        client = make_client(cfg)
        client.open(bootstrap)
        try:
            while not over.is_set():
                ctx = Context(worker=w, process=w, phase=MAIN)
                with lock:
                    op = gen.op(ctx)
                res = client.invoke(op)
                with lock:
                    gen.update(ctx, res)
                done[w] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(cfg.concurrency)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # warm-up: clients connected, topics created
    start = sum(done)
    time.sleep(seconds)
    n = sum(done) - start
    over.set()
    join_all(threads, 40)
    return n


def _harness(cfg, bootstrap: str, seconds: float, tmp: Path) -> tuple[int, int]:
    gen, lock = make_generator(cfg), threading.Lock()
    stats = Stats()
    path = tmp / "history.jsonl"
    writer = HistoryWriter(path)
    rec = Recorder(writer, stats)
    workers = [Worker(i, cfg=cfg, gen=gen, gen_lock=lock, recorder=rec, bootstrap=bootstrap,
                      make=lambda: make_client(cfg)) for i in range(cfg.concurrency)]
    over = threading.Event()
    threads = run_workers(workers, MAIN, over, Pacer(1e6))
    time.sleep(2.0)
    start = stats.ok + stats.info + stats.fail
    time.sleep(seconds)
    n = stats.ok + stats.info + stats.fail - start
    over.set()
    join_all(threads, 40)
    for w in workers:
        w.close()
    rec.close()
    lines = len(load_history(path))
    return n, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--client", default="confluent")
    ap.add_argument("--cluster", choices=("lab", "local"), default="lab")
    a = ap.parse_args()
    cfg = resolve_config(None, {"concurrency": a.workers, "nodes": a.nodes, "client": a.client, "seed": 1,
                                "replication_factor": min(3, a.nodes)})
    with tempfile.TemporaryDirectory() as d, _cluster(a.cluster, cfg, Path(d)) as bootstrap:
        raw = _raw(cfg, bootstrap, a.seconds)
        harness, lines = _harness(cfg, bootstrap, a.seconds, Path(d))
    raw_rate, h_rate = raw / a.seconds, harness / a.seconds
    print(f"cluster={a.cluster} nodes={a.nodes} client={a.client} workers={a.workers} seconds={a.seconds}")
    print(f"raw client calls:        {raw_rate:9.1f} ops/s")
    print(f"harness (with history):  {h_rate:9.1f} ops/s  ({lines} history lines)")
    if raw and harness:
        print(f"harness / raw:           {h_rate / raw_rate:9.3f}")
        per_op = a.workers * (1 / h_rate - 1 / raw_rate) * 1e6
        print(f"overhead per op:         {per_op:9.1f} us (per worker, harness minus raw)")


if __name__ == "__main__":
    main()

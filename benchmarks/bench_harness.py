"""Harness throughput: sustained ops/s with full history recording vs. raw client calls.

Both halves run in the same process against the same cluster, one after the other, with the
same workers, op mix (the queue generator, no txn) and client library:

- raw:     each thread calls the client adapter's invoke() directly, nothing recorded;
- harness: the runner's workers (timeout wrapper, generator lock, history.jsonl streaming,
           live counters), rate limit set far above what the cluster can do.

The two halves alternate for `--rounds` rounds (the first round also warms the cluster up:
topics, leaders, connections). Prints ops/s of both, their ratio and the harness's overhead
per op. `--cluster memory` swaps the brokers for an in-process log with a mutex, so the
figures are the harness's own ceiling rather than the brokers'. Usage:

    .venv/bin/python benchmarks/bench_harness.py [--workers 20] [--seconds 10] [--cluster lab|local|memory]
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
from logquake.runner import MAIN, Crew, Pacer, Recorder, Stats
from logquake.workloads import Context, make_client, make_generator


class _MemoryLog:
    """A log in this process: appends and reads under one lock (a near-zero-cost system)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[int, list[int]] = {}


class _MemoryClient:
    def __init__(self, log: _MemoryLog) -> None:
        self.log, self.assigned, self.pos = log, [], {}

    def open(self, bootstrap_servers: str) -> None:
        pass

    def close(self) -> None:
        pass

    def invoke(self, op):
        from logquake.history import INFO, OK
        from logquake.workloads import complete

        if op.f == "crash":
            return complete(op, INFO, op.value, error="crash")
        if op.f in ("assign", "subscribe"):
            self.assigned = list(op.value)
            return complete(op, OK, op.value)
        value = []
        with self.log.lock:
            for m in op.value:
                if m[0] == "send":
                    lg = self.log.logs.setdefault(m[1], [])
                    lg.append(m[2])
                    value.append(["send", m[1], [len(lg) - 1, m[2]]])
                else:
                    polled = {}
                    for k in self.assigned:
                        lg = self.log.logs.get(k, [])
                        start = self.pos.get(k, 0)
                        end = min(len(lg), start + 20)  # a fetch returns a bounded batch
                        if start < end:
                            polled[str(k)] = [[o, lg[o]] for o in range(start, end)]
                            self.pos[k] = end
                    value.append(["poll", polled])
        return complete(op, OK, value)


def _make(kind: str, cfg):
    """A client factory; for `memory`, each call of _make is a fresh log."""
    if kind == "memory":
        log = _MemoryLog()
        return lambda: _MemoryClient(log)
    return lambda: make_client(cfg)


@contextlib.contextmanager
def _cluster(kind: str, cfg, tmp: Path):
    if kind == "memory":
        yield "memory"
        return
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


def _raw(cfg, bootstrap: str, seconds: float, make) -> int:
    gen, lock = make_generator(cfg), threading.Lock()
    done = [0] * cfg.concurrency
    over = threading.Event()

    def loop(w: int) -> None:
        client = make()
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
    for t in threads:
        t.join(40)
    return n


def _harness(cfg, bootstrap: str, seconds: float, tmp: Path, make) -> tuple[int, int]:
    stats = Stats()
    path = tmp / f"history-{time.monotonic_ns()}.jsonl"
    rec = Recorder(HistoryWriter(path), stats)
    crew = Crew(cfg, make_generator(cfg), rec, bootstrap, make)
    over = threading.Event()
    crew.start(MAIN, over, Pacer(1e6))
    time.sleep(2.0)
    start = stats.ok + stats.info + stats.fail
    time.sleep(seconds)
    n = stats.ok + stats.info + stats.fail - start
    over.set()
    crew.join(40)
    crew.close()
    rec.close()
    return n, len(load_history(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--client", default="confluent")
    ap.add_argument("--cluster", choices=("lab", "local", "memory"), default="lab")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    cfg = resolve_config(None, {"concurrency": a.workers, "nodes": a.nodes, "client": a.client, "seed": 1,
                                "replication_factor": min(3, a.nodes)})
    print(f"cluster={a.cluster} nodes={a.nodes} client={a.client} workers={a.workers} seconds={a.seconds}")
    raws, hs = [], []
    with tempfile.TemporaryDirectory() as d, _cluster(a.cluster, cfg, Path(d)) as bootstrap:
        for r in range(a.rounds):
            raw = _raw(cfg, bootstrap, a.seconds, _make(a.cluster, cfg)) / a.seconds
            harness, lines = _harness(cfg, bootstrap, a.seconds, Path(d), _make(a.cluster, cfg))
            h = harness / a.seconds
            print(f"round {r + 1}: raw {raw:9.1f} ops/s   harness {h:9.1f} ops/s ({lines} history lines)")
            raws.append(raw)
            hs.append(h)
    # The last round is the steady state: the first one also created topics and elected leaders.
    raw_rate, h_rate = raws[-1], hs[-1]
    print(f"raw client calls:        {raw_rate:9.1f} ops/s")
    print(f"harness (with history):  {h_rate:9.1f} ops/s")
    if raw_rate and h_rate:
        print(f"harness / raw:           {h_rate / raw_rate:9.3f}")
        cost = (1 / h_rate - 1 / raw_rate) * 1e6
        print(f"overhead per op:         {cost:9.1f} us of the process (1/harness - 1/raw: the GIL")
        print(f"                         {cost * a.workers:9.1f} us of each worker's time   serialises both)")


if __name__ == "__main__":
    main()
